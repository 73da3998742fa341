// The failure protocol's heartbeats (docs/errors.md, "Heartbeats"): every rank of a
// communicator with more than one rank publishes hb/<rank> every period, learns from
// abort/cause that another rank decided a failure, and, stuck inside one collective,
// compares what the ranks inside it run.
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

// Heartbeats: a period a tenth of the timeout, within [50 ms, 1 s]; published once
// before the constructor returns, so that "no record" means "not running". A
// sub-communicator (hub given) beats on its family's thread, over its family's heartbeat
// connection to the store.
void Communicator::Impl::startHeartbeat(const std::shared_ptr<HeartbeatHub>& hub,
                                        const std::shared_ptr<Store>& hbRaw) {
  Failure& f = failure;
  f.hbHub = hub ? hub : std::make_shared<HeartbeatHub>();
  int64_t period = std::clamp<int64_t>(boot.timeout.count() / 10, 50, 1000);
  if (auto env = config::getEnvInt("TCCL_HEARTBEAT_MS", 0, 3600000)) period = *env;
  f.hbPeriod = std::chrono::milliseconds(boot.size > 1 ? period : 0);
  if (f.hbPeriod.count() == 0) return;
  // The rank's one store connection (a family's children share their root's): TcpStore
  // requests are tagged, so a heartbeat is answered while another thread's WAIT is parked
  // on the same connection (it used to open a second connection for that: two per rank).
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

// ---- the family's heartbeat thread ---------------------------------------------------

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
  members.push_back(Member{m, 0, -1, 0, std::chrono::steady_clock::now()});
  if (!thread.joinable()) thread = std::thread([this] { loop(); });
  cv.notify_all();
}

void Communicator::Impl::HeartbeatHub::remove(Communicator::Impl* m) {
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return busy != m; });
  std::erase_if(members, [&](const Member& x) { return x.impl == m; });
}

void Communicator::Impl::HeartbeatHub::poke() {
  { std::lock_guard<std::mutex> lk(mu); }
  cv.notify_all();
}

// Each member beats one of its periods after its last beat; a member whose period just
// became shorter (poke) is looked at again at once. One beat: publish the record, adopt
// a cause another rank decided and, inside one collective for a full period, compare.
void Communicator::Impl::HeartbeatHub::loop() {
  std::unique_lock<std::mutex> lk(mu);
  while (!stop) {
    const auto now = std::chrono::steady_clock::now();
    auto next = now + std::chrono::hours(1);
    Member* due = nullptr;
    for (Member& x : members) {
      const auto at = x.last + x.impl->currentPeriod();
      if (at <= now && due == nullptr) due = &x;
      next = std::min(next, at);
    }
    if (due == nullptr) {
      cv.wait_until(lk, next);
      continue;
    }
    Communicator::Impl* m = due->impl;
    busy = m;
    const int64_t beat = ++due->beat;
    int64_t entered = -1;
    bool inside = false;
    {
      std::lock_guard<std::mutex> hb(m->failure.hbMu);
      entered = m->failure.enteredSeq;
      inside = m->failure.enteredSeq > m->failure.completedSeq;
    }
    due->stuckBeats = inside && entered == due->stuckSeq ? due->stuckBeats + 1 : 0;
    due->stuckSeq = inside ? entered : -1;
    const bool compare = due->stuckBeats >= 1;
    lk.unlock();
    try {
      m->publishHeartbeat(beat);
      // From the first full period inside one collective, every period: the others'
      // records lag by up to a period, so a rank not yet in it is simply not compared.
      if (compare && !m->failure.abortFlag.load()) m->compareWhileStuck(beat, entered);
    } catch (const std::exception&) {
      // The store is unreachable: nothing to publish to; the sockets still tell.
    }
    lk.lock();
    busy = nullptr;
    for (Member& x : members) {
      if (x.impl == m) x.last = std::chrono::steady_clock::now();
    }
    cv.notify_all();  // a remove() may wait for this member
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

std::map<int, failure::Heartbeat> Communicator::Impl::readHeartbeats(Store& from) {
  std::map<int, failure::Heartbeat> out;
  for (int r = 0; r < boot.size; ++r) {
    if (r == boot.rank) continue;
    try {
      const std::string k = failure::keys::heartbeat(r);
      if (!from.check({k})) continue;
      if (auto h = failure::decodeHeartbeat(from.getString(k))) out[r] = *h;
    } catch (const std::exception&) {
    }
  }
  return out;
}

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
  // Its beat advances once a period: 1.5 periods always see one, and are short next to
  // a timeout (a period is a tenth of it).
  const auto gap = std::min<std::chrono::milliseconds>(period * 3 / 2, std::chrono::seconds(2));
  std::this_thread::sleep_for(gap);
  const auto second = read();
  if (!second || second->beat <= first->beat) {
    return who + "'s heartbeat has stopped (beat #" + std::to_string(first->beat) + " for " +
           std::to_string(gap.count()) + " ms): it may be dead or stopped";
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

void Communicator::Impl::publishHeartbeat(int64_t beat) {
  Store& via = *failure.hbStore;
  via.setString(failure::keys::heartbeat(boot.rank), failure::encodeHeartbeat(ownHeartbeat(beat)));
  if (!failure.abortFlag.load() && via.check({failure::keys::kCause})) {
    // Another rank decided: this rank fails too, at its next wait or call.
    if (auto cause = failure::decodeCause(via.getString(failure::keys::kCause))) {
      setAbortCause(*cause);
      wake();
    }
  }
}

// Ranks that chose different algorithms (a count mismatch under Auto, say) may never
// exchange a message that would show it: their heartbeats do.
void Communicator::Impl::compareWhileStuck(int64_t beat, int64_t entered) {
  Store& via = *failure.hbStore;
  const failure::Heartbeat self = ownHeartbeat(beat);
  // This rank may have finished #entered and entered the next since the loop looked: its
  // fingerprint is then the next one's, and compared with the others' of #entered it would
  // make this rank the odd one out. It is not stuck in #entered any more.
  if (self.entered != entered) return;
  std::map<int, uint32_t> fps{{boot.rank, self.fingerprint}};
  auto others = readHeartbeats(via);
  for (const auto& [r, h] : others) {
    if (h.entered == entered) fps[r] = h.fingerprint;
  }
  const int outlier = failure::majorityOutlier(fps, boot.size);
  if (outlier < 0 || !claim(via)) return;
  ErrorInfo c;
  c.kind = ErrorKind::Mismatch;
  c.rank = boot.rank;
  c.detectedBy = boot.rank;
  c.culprit = outlier;
  c.culpritAddress = boot.transport->publishedAddress(outlier, failure.hbStore.get());
  c.seq = entered;
  c.localSignature = self.signature;
  c.remoteSignature = outlier == boot.rank ? self.signature : others[outlier].signature;
  c.message = "rank " + std::to_string(outlier) + " runs a different collective #" +
              std::to_string(entered) + " than the other ranks (" + c.remoteSignature +
              "), found by comparing heartbeats";
  publishCause(via, c);
  setAbortCause(c);
  wake();
}

}  // namespace tccl
