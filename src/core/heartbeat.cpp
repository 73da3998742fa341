// The failure protocol's heartbeats (docs/errors.md, "Heartbeats"): every rank of a
// communicator with more than one rank publishes its record hb/<rank> once, and again
// only when asked (a census) or stuck. Each process reads its family's event log once a
// period (one CHECK: O(N) reads in total, no writes), which tells it of censuses and of
// causes decided elsewhere; stuck inside one collective, the ranks count themselves in
// and one of them compares what they all run.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "base/config.hpp"
#include "core/comm_impl.hpp"

namespace tccl {

void Communicator::Impl::startFailureWatch(const std::shared_ptr<HeartbeatHub>& hub,
                                           const std::shared_ptr<Store>& hbRaw) {
  Failure& f = failure;
  f.wakeFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  boot.transport->setInterrupt(f.wakeFd, &f.abortFlag);
  if (auto spec = config::getEnv("TCCL_FAULT")) {
    std::string err;
    f.fault = FaultSpec::parse(*spec, &err);
    if (!f.fault) throwError(ErrorKind::InvalidArgument, err, boot.rank);
  }
  startHeartbeat(hub, hbRaw);
}

// Heartbeats: a period a tenth of the timeout, within [50 ms, 1 s]. The record is
// published once before the constructor returns, so that "no record" means "not
// running"; after that only when a census asks for it or the rank is stuck (no write per
// period). A sub-communicator (hub given) is watched by its family's thread, over its
// family's store connection, and its events go to the family's log.
void Communicator::Impl::startHeartbeat(const std::shared_ptr<HeartbeatHub>& hub,
                                        const std::shared_ptr<Store>& hbRaw) {
  Failure& f = failure;
  f.hbHub = hub ? hub
                : std::make_shared<HeartbeatHub>(std::make_shared<PrefixStore>(
                      "tccl/" + boot.options.name, hbRaw ? hbRaw : boot.userStore));
  int64_t period = std::clamp<int64_t>(boot.timeout.count() / 10, 50, 1000);
  if (auto env = config::getEnvInt("TCCL_HEARTBEAT_MS", 0, 3600000)) period = *env;
  f.hbPeriod = std::chrono::milliseconds(boot.size > 1 ? period : 0);
  if (f.hbPeriod.count() == 0) return;
  // The rank's one store connection (a family's children share their root's): TcpStore
  // requests are tagged, so the watch's requests are answered while another thread's
  // WAIT is parked on the same connection. The watch itself never blocks on it.
  f.hbRaw = hbRaw ? hbRaw : boot.userStore;
  f.hbStore = std::make_shared<PrefixStore>("tccl/" + boot.options.name, f.hbRaw);
  boot.store->setString(failure::keys::heartbeat(boot.rank),
                        failure::encodeHeartbeat(ownHeartbeat(0)));
  f.hbHub->add(this);
  f.hbMember = true;
}

void Communicator::Impl::stopHeartbeat() {
  if (failure.hbMember) failure.hbHub->remove(this);
  failure.hbMember = false;
}

std::chrono::milliseconds Communicator::Impl::currentPeriod() {
  Failure& f = failure;
  std::lock_guard<std::mutex> lk(f.hbMu);
  const bool inCall = f.enteredSeq > f.completedSeq && f.running.period.count() > 0;
  auto period = inCall ? std::min(f.hbPeriod, f.running.period) : f.hbPeriod;
  if (f.planPeriod.count() > 0) period = std::min(period, f.planPeriod);
  return period;
}

// ---- the family's watch thread ------------------------------------------------------

Communicator::Impl::HeartbeatHub::HeartbeatHub(std::shared_ptr<Store> log) : log_(std::move(log)) {}

Communicator::Impl::HeartbeatHub::~HeartbeatHub() {
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  if (thread.joinable()) thread.join();
}

void Communicator::Impl::HeartbeatHub::add(Communicator::Impl* m) {
  std::lock_guard<std::mutex> lk(mu);
  members.push_back(m);
  if (!thread.joinable()) thread = std::thread([this] { loop(); });
  cv.notify_all();
}

void Communicator::Impl::HeartbeatHub::remove(Communicator::Impl* m) {
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return !passing; });
  std::erase(members, m);
}

void Communicator::Impl::HeartbeatHub::poke() {
  { std::lock_guard<std::mutex> lk(mu); }
  cv.notify_all();
}

void Communicator::Impl::HeartbeatHub::post(const failure::Event& e) {
  const int64_t n = log_->add(failure::keys::kEventCount, 1);
  log_->setString(failure::keys::event(n), failure::encodeEvent(e));
}

// One pass every tick (the shortest period of any member; a poke recomputes it): one
// CHECK for the family's next event, whatever the number of members, then each member's
// stuck watch, which is local unless the member has just been stuck for a period.
void Communicator::Impl::HeartbeatHub::loop() {
  std::unique_lock<std::mutex> lk(mu);
  auto last = std::chrono::steady_clock::now();
  while (!stop) {
    if (members.empty()) {
      cv.wait(lk);
      continue;
    }
    auto tick = std::chrono::milliseconds(std::chrono::hours(1));
    for (Communicator::Impl* m : members) tick = std::min(tick, m->currentPeriod());
    if (std::chrono::steady_clock::now() < last + tick) {
      cv.wait_until(lk, last + tick);
      continue;
    }
    const std::vector<Communicator::Impl*> now = members;
    passing = true;  // remove() waits: no member goes away during the pass
    lk.unlock();
    pass(now);
    lk.lock();
    passing = false;
    last = std::chrono::steady_clock::now();
    cv.notify_all();
  }
}

void Communicator::Impl::HeartbeatHub::pass(const std::vector<Communicator::Impl*>& now) {
  try {
    for (;;) {
      const std::string k = failure::keys::event(seen_ + 1);
      if (!log_->check({k})) break;
      const auto e = failure::decodeEvent(log_->getString(k));
      ++seen_;
      if (!e) continue;
      for (Communicator::Impl* m : now) {
        if (!e->concerns(m->boot.jobId, m->boot.options.name, m->boot.rank)) continue;
        try {
          m->answerEvent(*e);
        } catch (const std::exception&) {
          // This member's answer is lost (its census sees it silent); the next one's is not.
        }
      }
    }
  } catch (const std::exception&) {
    // The store is unreachable: no event to learn; the sockets still tell.
  }
  for (Communicator::Impl* m : now) {
    try {
      m->watchStuck();
    } catch (const std::exception&) {
    }
  }
}

// ---- a member's side of the watch (the hub's thread) ----------------------------------

void Communicator::Impl::publishRecord() {
  const int64_t beat = ++failure.hbBeat;
  failure.hbStore->setString(failure::keys::heartbeat(boot.rank),
                             failure::encodeHeartbeat(ownHeartbeat(beat)));
}

void Communicator::Impl::answerEvent(const failure::Event& e) {
  if (e.kind == failure::Event::Kind::Census) {
    publishRecord();
    return;
  }
  Store& via = *failure.hbStore;
  if (!failure.abortFlag.load() && via.check({failure::keys::kCause})) {
    // Another rank decided: this rank fails too, at its next wait or call.
    if (auto cause = failure::decodeCause(via.getString(failure::keys::kCause))) {
      setAbortCause(*cause);
      wake();
    }
  }
}

// Inside one collective for a full period: publish the record once for it and count in.
// Ranks that chose different algorithms (a count mismatch under Auto, say) may never
// exchange a message that would show it: their records do, once enough are in.
void Communicator::Impl::watchStuck() {
  Failure& f = failure;
  int64_t entered = -1;
  bool inside = false;
  {
    std::lock_guard<std::mutex> lk(f.hbMu);
    entered = f.enteredSeq;
    inside = f.enteredSeq > f.completedSeq;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!inside) {
    f.stuckSeq = -1;
    return;
  }
  if (entered != f.stuckSeq) {
    f.stuckSeq = entered;
    f.stuckSince = now;
    f.stuckCounted = false;
    return;
  }
  if (f.stuckCounted || f.abortFlag.load() || now - f.stuckSince < currentPeriod()) return;
  f.stuckCounted = true;
  publishRecord();
  const int64_t arrived = f.hbStore->add(failure::keys::stuck(entered), 1);
  if (failure::compareAt(arrived, boot.size)) compareStuck(entered);
}

void Communicator::Impl::compareStuck(int64_t entered) {
  Store& via = *failure.hbStore;
  const failure::Heartbeat self = ownHeartbeat(failure.hbBeat);
  // This rank may have finished #entered and entered the next since the watch looked:
  // its fingerprint is then the next one's. It is not stuck in #entered any more.
  if (self.entered != entered || failure.abortFlag.load()) return;
  auto others = readHeartbeats(via);
  const int outlier =
      failure::stuckOutlier(boot.rank, boot.size, entered, self.fingerprint, others);
  if (outlier < 0 || !claim(via)) return;
  ErrorInfo c;
  c.kind = ErrorKind::Mismatch;
  c.rank = boot.rank;
  c.detectedBy = boot.rank;
  c.culprit = outlier;
  c.culpritAddress = boot.transport->publishedAddress(outlier, failure.hbStore.get());
  c.seq = entered;
  c.localSignature = self.signature;
  c.remoteSignature = self.signature;
  if (outlier != boot.rank) {
    const failure::Heartbeat& h = others[outlier];
    c.remoteSignature = h.entered == entered ? h.signature : std::string();
    for (const auto& p : h.recent) {
      if (p.seq == entered) c.remoteSignature = p.signature;
    }
  }
  c.message = "rank " + std::to_string(outlier) + " runs a different collective #" +
              std::to_string(entered) + " than the other ranks (" + c.remoteSignature +
              "), found by comparing heartbeats";
  publishCause(via, c);
  setAbortCause(c);
  wake();
}

void Communicator::Impl::postEvent(failure::Event::Kind kind, int target) {
  if (failure.hbPeriod.count() == 0 || !failure.hbHub) return;
  failure::Event e;
  e.kind = kind;
  e.job = boot.jobId;
  e.target = target;
  e.comm = boot.options.name;
  try {
    failure.hbHub->post(e);
  } catch (const std::exception&) {
    // No store: nobody to ask; the verdict goes by the records there are.
  }
}

failure::Heartbeat Communicator::Impl::ownHeartbeat(int64_t beat) {
  Failure& f = failure;
  failure::Heartbeat h;
  h.beat = beat;
  std::lock_guard<std::mutex> lk(f.hbMu);
  h.entered = f.enteredSeq;
  h.completed = f.completedSeq;
  if (f.enteredSeq >= 0) {
    h.fingerprint = f.running.fingerprint;
    h.signature = describe(f.enteredSeq, f.running);
  }
  for (const auto& [seqNo, r] : f.recent) {
    if (r.fingerprint != 0) h.recent.push_back({seqNo, r.fingerprint, describe(seqNo, r)});
  }
  std::sort(h.recent.begin(), h.recent.end(),
            [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return h;
}

// Every other rank's record, in a few requests: one CHECK of all keys, then MULTI_GETs
// of a bounded number of keys each (the reply stays far below the store's frame limit).
// A rank without a record (not running) makes the CHECK fail: then each key is looked at
// on its own, which a verdict does once, O(N) requests in all.
std::map<int, failure::Heartbeat> Communicator::Impl::readHeartbeats(Store& from) {
  constexpr size_t kChunk = 256;
  std::vector<int> ranks;
  std::vector<std::string> keys;
  for (int r = 0; r < boot.size; ++r) {
    if (r == boot.rank) continue;
    ranks.push_back(r);
    keys.push_back(failure::keys::heartbeat(r));
  }
  std::map<int, failure::Heartbeat> out;
  auto take = [&](size_t i, const Bytes& v) {
    if (auto h = failure::decodeHeartbeat(std::string(v.begin(), v.end()))) out[ranks[i]] = *h;
  };
  try {
    if (!keys.empty() && from.check(keys)) {
      for (size_t lo = 0; lo < keys.size(); lo += kChunk) {
        const size_t hi = std::min(keys.size(), lo + kChunk);
        std::vector<std::string> part(keys.begin() + static_cast<std::ptrdiff_t>(lo),
                                      keys.begin() + static_cast<std::ptrdiff_t>(hi));
        const auto values = from.multiGet(part, std::chrono::milliseconds(1000));
        for (size_t i = 0; i < values.size(); ++i) take(lo + i, values[i]);
      }
      return out;
    }
  } catch (const std::exception&) {
    out.clear();
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    try {
      if (from.check({keys[i]})) take(i, from.get(keys[i]));
    } catch (const std::exception&) {
    }
  }
  return out;
}

// The peer's record, then a census asking only the peer to write a fresh one: a live
// peer answers within one of its periods, a stopped or dead one does not.
std::string Communicator::Impl::describePeerHealth(int peer) {
  const auto period = failure.hbPeriod;
  if (period.count() <= 0 || !failure.hbStore) return "heartbeats are off";
  const std::string who = "rank " + std::to_string(peer);
  const std::string k = failure::keys::heartbeat(peer);
  auto read = [&]() -> std::optional<failure::Heartbeat> {
    try {
      if (!failure.hbStore->check({k})) return std::nullopt;
      return failure::decodeHeartbeat(failure.hbStore->getString(k));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  const auto first = read();
  if (!first) return who + " has no heartbeat record";
  postEvent(failure::Event::Kind::Census, peer);
  // One period for the peer's watch to see the census, and as much again (at most a
  // second) for a loaded host: short next to a timeout (a period is a tenth of it).
  const auto gap = period + std::min<std::chrono::milliseconds>(period, std::chrono::seconds(1));
  std::this_thread::sleep_for(gap);
  const auto second = read();
  if (!second || second->beat <= first->beat) {
    return who + "'s heartbeat has stopped (beat #" + std::to_string(first->beat) +
           " did not answer a census in " + std::to_string(gap.count()) +
           " ms): it may be dead or stopped";
  }
  std::string where = second->entered > second->completed && !second->signature.empty()
                          ? "inside " + second->signature
                          : "between collectives";
  return who + " is alive (heartbeat #" + std::to_string(first->beat) + " -> #" +
         std::to_string(second->beat) + ", " + where + ")";
}

// From the start of a collective, before it is entered: reading the hosts may take up to
// the call's timeout, and a rank that then judges a timeout reads the heartbeats a few of
// the call's periods apart. (Left set when the call fails there, as running.period is.)
void Communicator::Impl::planCall(const Running& what) {
  Failure& f = failure;
  bool faster = false;
  {
    std::lock_guard<std::mutex> lk(f.hbMu);
    faster = what.period.count() > 0 && what.period < f.hbPeriod;
    f.planPeriod = what.period;
  }
  if (faster && f.hbHub) f.hbHub->poke();
}

void Communicator::Impl::enterCall(int64_t seq, const Running& what) {
  Failure& f = failure;
  bool faster = false;
  {
    std::lock_guard<std::mutex> lk(f.hbMu);
    faster = what.period.count() > 0 && what.period < f.hbPeriod;
    f.planPeriod = std::chrono::milliseconds(0);  // running.period takes over
    f.running = what;
    f.enteredSeq = seq;
    f.recent[static_cast<size_t>(seq) % Failure::kRecent] = {seq, what};
  }
  if (faster && f.hbHub) f.hbHub->poke();
}

void Communicator::Impl::completeCall(int64_t seq) {
  std::lock_guard<std::mutex> lk(failure.hbMu);
  failure.completedSeq = seq;
}

}  // namespace tccl
