// The transport's service thread and the p2p lane's dials (transport.hpp says why).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "base/log.hpp"
#include "tccl/error.hpp"
#include "transport/transport.hpp"
#include "transport/transport_detail.hpp"

namespace tccl {

using namespace transport_detail;

void Transport::signalLinkEvent() {
  linkEvents_.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t one = 1;
  std::lock_guard<std::mutex> lk(subscribersMu_);
  for (const net::Fd& fd : linkSubscribers_) {
    const ssize_t r = ::write(fd.get(), &one, sizeof one);
    (void)r;
  }
}

int Transport::subscribeLinkEvents() {
  net::Fd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.valid()) throwError(ErrorKind::System, "eventfd: " + net::errnoString(errno), cfg_.rank);
  const int raw = fd.get();
  std::lock_guard<std::mutex> lk(subscribersMu_);
  linkSubscribers_.push_back(std::move(fd));
  return raw;
}

void Transport::unsubscribeLinkEvents(int fd) {
  std::lock_guard<std::mutex> lk(subscribersMu_);
  for (auto it = linkSubscribers_.begin(); it != linkSubscribers_.end(); ++it) {
    if (it->get() == fd) {
      linkSubscribers_.erase(it);
      return;
    }
  }
}

std::vector<Link*> Transport::links(Lane lane) const {
  std::vector<Link*> out;
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [key, l] : links_) {
    if (key.second == lane) out.push_back(l.get());
  }
  return out;
}

bool Transport::p2pUnderWay(int peer) const {
  if (dialling_.count(peer)) return true;
  for (const auto& q : pending_) {
    if (q->peer == peer && q->lane == Lane::P2P) return true;  // ours, or theirs identified
  }
  return false;
}

Link* Transport::tryLink(int peer) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = links_.find({peer, Lane::P2P}); it != links_.end()) return it->second.get();
  if (auto e = dialErrors_.find(peer); e != dialErrors_.end()) {
    ErrorInfo info = e->second;
    dialErrors_.erase(e);
    throwError(std::move(info));
  }
  if (peer < 0 || peer >= cfg_.worldSize || peer == cfg_.rank) {
    throwError(ErrorKind::InvalidArgument, "no rank " + std::to_string(peer) + " to connect to",
               cfg_.rank, peer);
  }
  if (p2pUnderWay(peer) || stopping_.load()) return nullptr;
  dialling_.insert(peer);
  dialers_.emplace_back([this, peer] { dialP2P(peer); });
  return nullptr;
}

void Transport::dialP2P(int peer) {
  const Deadline deadline = Deadline::after(cfg_.dialTimeout);
  auto fail = [&](ErrorInfo info) {
    info.rank = cfg_.rank;
    info.peer = peer;
    if (info.phase.empty()) info.phase = "connect (p2p lane)";
    std::lock_guard<std::mutex> lk(mu_);
    dialling_.erase(peer);
    dialErrors_[peer] = std::move(info);
    signalLinkEvent();
  };
  try {
    if (!awaitAddress(peer, deadline, [this] { return stopping_.load(); })) {
      ErrorInfo info;
      info.kind = ErrorKind::Aborted;
      info.message = "the transport closed while dialling";
      fail(std::move(info));
      return;
    }
    std::unique_ptr<Pending> pend = dial(peer, Lane::P2P, deadline);
    {
      std::lock_guard<std::mutex> lk(mu_);
      dialling_.erase(peer);
      pending_.push_back(std::move(pend));
    }
    wakeService();
  } catch (const Error& e) {
    fail(e.info());
  }
}

void Transport::acceptAll() {
  if (Deadline::Clock::now() < acceptPausedUntil_) return;
  for (;;) {
    net::SockAddr from;
    int err = 0;
    net::Fd fd = net::acceptNonBlocking(listener_.get(), &from, &err);
    if (!fd.valid()) {
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) acceptExhausted(err);
      break;
    }
    acceptBackoff_ = std::chrono::milliseconds(0);  // descriptors again: the next pause is short
    size_t incoming = 0;
    for (const auto& q : pending_) incoming += q->outgoing ? 0 : 1;
    if (incoming >= static_cast<size_t>(std::max(1, cfg_.maxPending))) {
      if (!evictOldestIncoming()) {
        // Every entry is this round's (a peer among them may not have been read yet):
        // keep this one too, one over the cap, and accept no more until their Hellos are
        // read; the rest wait in the kernel's queue.
        pending_.push_back(makeIncoming(std::move(fd), from));
        break;
      }
    }
    if (incoming >= static_cast<size_t>(std::max(1, cfg_.maxPending)) && !warnedCap_) {
      warnedCap_ = true;
      TCCL_WARN("listener " << listenAddr_ << ": " << incoming
                            << " connections in their handshake, the cap (TCCL_LISTEN_MAX_PENDING="
                            << cfg_.maxPending
                            << "): closing the oldest to make room for each new one (logged "
                               "once; the count is logged when the communicator closes)");
    }
    pending_.push_back(makeIncoming(std::move(fd), from));
  }
}

std::unique_ptr<Transport::Pending> Transport::makeIncoming(net::Fd fd, const net::SockAddr& from) {
  auto pend = std::make_unique<Pending>();
  pend->fd = std::move(fd);
  pend->address = from.toString();
  pend->since = Deadline::Clock::now();
  return pend;
}

bool Transport::evictOldestIncoming() {
  // A peer sends its Hello as soon as its connect completes, so the connections that sit
  // longest without one (then those still without a proof) are strangers.
  auto victim = pending_.end();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const Pending& q = **it;
    if (q.outgoing || !q.seen) continue;
    if (victim == pending_.end() ||
        (q.stage == Stage::AwaitHello && (*victim)->stage != Stage::AwaitHello) ||
        (q.stage == (*victim)->stage && q.since < (*victim)->since)) {
      victim = it;
    }
  }
  if (victim == pending_.end()) return false;
  ++evicted_;
  pending_.erase(victim);
  return true;
}

void Transport::acceptExhausted(int err) {
  // The queued connection keeps the listener readable: polling it again at once would spin
  // a core. Free a descriptor if a stranger holds one, and look again after a pause that
  // doubles (10 ms to 1 s) while the shortage lasts.
  acceptBackoff_ = std::clamp(acceptBackoff_ * 2, std::chrono::milliseconds(10),
                              std::chrono::milliseconds(1000));
  acceptPausedUntil_ = Deadline::Clock::now() + acceptBackoff_;
  const bool freed = evictOldestIncoming();
  if (!warnedFdLimit_) {
    warnedFdLimit_ = true;
    TCCL_WARN("listener " << listenAddr_ << ": accept failed: " << net::errnoString(err)
                          << "; pausing accepts (10 ms to 1 s at a time) while it lasts"
                          << (freed ? ", closing the oldest connection in its handshake" : "")
                          << " (logged once; raise ulimit -n if peers cannot connect)");
  }
}

int Transport::listenerPollFd() const {
  return Deadline::Clock::now() < acceptPausedUntil_ ? -1 : listener_.get();
}

int Transport::capPollTimeout(int timeoutMs) const {
  const auto now = Deadline::Clock::now();
  if (now >= acceptPausedUntil_) return timeoutMs;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(acceptPausedUntil_ - now);
  const int ms = static_cast<int>(left.count()) + 1;
  return timeoutMs < 0 ? ms : std::min(timeoutMs, ms);
}

bool Transport::expired(const Pending& p, Deadline::Clock::time_point now) {
  if (p.outgoing || now - p.since <= cfg_.handshakeTimeout) return false;
  warnStranger("dropping a connection from " + p.address +
               " that did not finish its handshake in " +
               std::to_string(cfg_.handshakeTimeout.count()) + " ms (TCCL_HANDSHAKE_TIMEOUT_MS)");
  return true;
}

void Transport::warnStranger(const std::string& line) {
  ++strangerEvents_;
  if (strangerEvents_ <= kStrangerLines) {
    TCCL_WARN(line);
  } else if (strangerEvents_ == kStrangerLines + 1) {
    TCCL_WARN("more than " << kStrangerLines
                           << " connections refused or dropped by this rank's listener; the rest "
                              "are counted, not logged (the count is logged when it closes)");
  }
}

void Transport::wakeService() {
  const Transport& served = hub_ ? *hub_ : *this;
  const uint64_t one = 1;
  const ssize_t r = ::write(served.serviceWake_.get(), &one, sizeof one);
  (void)r;
}

bool Transport::routeToChild(Pending& p, const wire::Hello& h) {
  // childMu_ is held while the child takes the connection, so that the child cannot
  // unregister (and be destroyed) in between.
  std::lock_guard<std::mutex> lk(childMu_);
  for (Transport* c : children_) {
    if (c->cfg_.commId != h.commId) continue;
    c->adoptIncoming(std::make_unique<Pending>(std::move(p)), h);
    return true;
  }
  return false;
}

void Transport::adoptIncoming(std::unique_ptr<Pending> p, const wire::Hello& h) {
  std::lock_guard<std::mutex> lk(mu_);
  bool done = false;
  try {
    done = onIncoming(*p, h);
  } catch (const Error& e) {
    TCCL_WARN("a connection from " << p->address << " failed its handshake: " << e.what());
    done = true;
  }
  if (!done) {
    // Authenticating: the proof comes later, read by the hub's service thread (which
    // services this child's pending connections) or by a thread in this child's connect().
    pending_.push_back(std::move(p));
    wakeOthers(-1);
    wakeService();
  }
}

void Transport::serviceRound(std::vector<pollfd>& fds) {
  fds.clear();
  fds.push_back({listenerPollFd(), POLLIN, 0});  // -1 (ignored) while accepts pause, or a child
  fds.push_back({serviceWake_.get(), POLLIN, 0});
  servicePending(fds);
}

void Transport::servicePending(std::vector<pollfd>& fds) {
  const auto now = Deadline::Clock::now();
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = *pending_[i];
    // Outgoing collective-lane handshakes belong to the thread in connect().
    if (p.outgoing && p.lane != Lane::P2P) {
      ++i;
      continue;
    }
    bool done = false;
    try {
      done = service(p);
    } catch (const Error& e) {
      dialErrors_[p.peer] = e.info();
      signalLinkEvent();
      done = true;
    }
    if (!done && expired(p, now)) done = true;
    p.seen = true;
    if (done) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  for (const auto& p : pending_) {
    if (!p->outgoing || p->lane == Lane::P2P) fds.push_back({p->fd.get(), POLLIN, 0});
  }
}

void Transport::serviceLoop() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    int timeout = 1000;  // 1 s: expire strangers
    {
      std::lock_guard<std::mutex> lk(mu_);
      serviceRound(fds);
      timeout = capPollTimeout(timeout);
    }
    {
      // The children's handshakes in progress and their p2p dials' replies, in the same
      // poll (childMu_ held: a child unregisters only between rounds).
      std::lock_guard<std::mutex> reg(childMu_);
      for (Transport* child : children_) {
        std::lock_guard<std::mutex> lk(child->mu_);
        child->servicePending(fds);
      }
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (stopping_.load()) break;
    if (n <= 0) continue;
    if (fds[1].revents != 0) {
      uint64_t v = 0;
      const ssize_t r = ::read(serviceWake_.get(), &v, sizeof v);
      (void)r;
    }
    if (fds[0].revents & POLLIN) {
      std::lock_guard<std::mutex> lk(mu_);
      acceptAll();
      wakeOthers(-1);  // a thread in connect() may be waiting for this one
    }
  }
}

}  // namespace tccl
