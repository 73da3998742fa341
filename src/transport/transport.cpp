#include "transport/transport.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "core/log.hpp"
#include "tccl/error.hpp"

namespace tccl {
namespace {

// A would-be peer that has not finished its Hello in this long is dropped, so that a
// silent stranger cannot pin a descriptor forever.
constexpr std::chrono::seconds kStrangerGrace{30};

std::string addrKey(int rank) { return "addr/" + std::to_string(rank); }

}  // namespace

Transport::Transport(TransportConfig config, std::shared_ptr<Store> store)
    : cfg_(std::move(config)), store_(std::move(store)) {
  listener_ = net::listenOn(cfg_.listenAddress, 0);
  net::SockAddr a = net::localAddress(listener_.get());
  listenAddr_ = net::joinHostPort(a.ip(), a.port());
  store_->setString(addrKey(cfg_.rank), listenAddr_);
  TCCL_INFO("listening on " << listenAddr_);
}

Transport::~Transport() = default;

Channel& Transport::channel(int peer) {
  auto it = channels_.find(peer);
  if (it == channels_.end()) {
    throwError(ErrorKind::InvalidArgument, "no connection to rank " + std::to_string(peer),
               cfg_.rank, peer);
  }
  return *it->second;
}

bool Transport::connected(int peer) const { return channels_.count(peer) != 0; }

std::string Transport::publishedAddress(int peer) const {
  auto it = published_.find(peer);
  if (it != published_.end()) return it->second;
  if (store_->check({addrKey(peer)})) {
    return published_[peer] = store_->getString(addrKey(peer));
  }
  return "";
}

CommStats Transport::stats() const {
  CommStats s;
  for (const auto& [peer, ch] : channels_) s.perPeer[peer] = ch->counters;
  return s;
}

void Transport::resetStats() {
  for (auto& [peer, ch] : channels_) ch->counters = PeerCounters{};
}

void Transport::closeAll() {
  // Half-close: the peers read whatever we already sent (so a peer that is about to
  // report a mismatch still sees our header), then end-of-file. A full close with
  // unread input would send a reset that discards that data. The descriptors close
  // with the transport.
  for (auto& [peer, ch] : channels_) {
    if (ch->fd.valid()) ::shutdown(ch->fd.get(), SHUT_WR);
  }
  pending_.clear();
}

void Transport::addChannel(int peer, net::Fd fd, const std::string& address) {
  auto ch = std::make_unique<Channel>();
  ch->peer = peer;
  ch->address = address;
  ch->fd = std::move(fd);
  net::setBufferSizes(ch->fd.get(), cfg_.socketBufferBytes, cfg_.socketBufferBytes);
  ch->counters.wireSent += wire::kHelloSize;
  ch->counters.wireRecv += wire::kHelloSize;
  TCCL_INFO("connected to rank " << peer << " at " << address);
  channels_[peer] = std::move(ch);
}

void Transport::finishIncoming(Pending& p) {
  wire::Hello h;
  wire::RejectReason reason = wire::RejectReason::None;
  if (wire::decodeHello(p.buf, &h) != wire::DecodeStatus::Ok) {
    reason = wire::RejectReason::BadMagic;
  } else {
    reason = wire::checkHello(h, cfg_.jobId, cfg_.commId, cfg_.rank, cfg_.worldSize);
    if (reason == wire::RejectReason::None && (h.rank > cfg_.rank || channels_.count(h.rank))) {
      // Only lower ranks dial us, and only once.
      reason = h.rank > cfg_.rank ? wire::RejectReason::BadRank : wire::RejectReason::Duplicate;
    }
  }
  wire::Hello reply;
  reply.jobId = cfg_.jobId;
  reply.commId = cfg_.commId;
  reply.rank = cfg_.rank;
  reply.worldSize = cfg_.worldSize;
  reply.targetRank = reason == wire::RejectReason::None ? h.rank : -1;
  reply.kind =
      reason == wire::RejectReason::None ? wire::HelloKind::Accept : wire::HelloKind::Reject;
  reply.reason = reason;
  uint8_t out[wire::kHelloSize];
  wire::encodeHello(reply, out);
  // 40 bytes into a fresh socket's empty send buffer: this does not block.
  net::IoStatus st =
      net::sendAll(p.fd.get(), out, sizeof out, Deadline::after(std::chrono::milliseconds(1000)));
  if (reason != wire::RejectReason::None) {
    TCCL_WARN("rejected a connection from " << p.address << ": " << wire::toString(reason));
    return;  // p.fd closes when the pending entry is dropped
  }
  if (st != net::IoStatus::Ok) {
    TCCL_WARN("rank " << h.rank << " at " << p.address << " went away during the handshake");
    return;
  }
  addChannel(h.rank, std::move(p.fd), p.address);
}

void Transport::finishOutgoing(Pending& p) {
  wire::Hello h;
  ErrorInfo info;
  info.rank = cfg_.rank;
  info.peer = p.peer;
  info.peerAddress = p.address;
  if (wire::decodeHello(p.buf, &h) != wire::DecodeStatus::Ok) {
    info.kind = ErrorKind::Handshake;
    info.message = "the process at this address did not answer like a tccl peer";
    throwError(std::move(info));
  }
  if (h.kind == wire::HelloKind::Reject) {
    info.kind = ErrorKind::Handshake;
    info.message = "connection refused by the peer: " + std::string(wire::toString(h.reason));
    throwError(std::move(info));
  }
  if (h.kind != wire::HelloKind::Accept || h.rank != p.peer || h.jobId != cfg_.jobId ||
      h.commId != cfg_.commId || h.targetRank != cfg_.rank) {
    info.kind = ErrorKind::Handshake;
    info.message = "unexpected handshake reply (rank " + std::to_string(h.rank) + ", kind " +
                   std::to_string(static_cast<int>(h.kind)) + ")";
    throwError(std::move(info));
  }
  addChannel(p.peer, std::move(p.fd), p.address);
}

bool Transport::service(Pending& p) {
  while (p.got < wire::kHelloSize) {
    ssize_t n = ::recv(p.fd.get(), p.buf + p.got, wire::kHelloSize - p.got, 0);
    if (n > 0) {
      p.got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    // Closed or reset before a full Hello.
    if (p.outgoing) {
      ErrorInfo info;
      info.kind = ErrorKind::PeerClosed;
      info.rank = cfg_.rank;
      info.peer = p.peer;
      info.peerAddress = p.address;
      info.message = "connection closed during the handshake (the peer refused or died)";
      throwError(std::move(info));
    }
    TCCL_WARN("a connection from " << p.address << " closed after " << p.got
                                   << " handshake bytes; ignored");
    return true;
  }
  if (p.outgoing) {
    finishOutgoing(p);
  } else {
    finishIncoming(p);
  }
  return true;
}

void Transport::connect(const std::vector<int>& peers, Deadline deadline) {
  auto start = Deadline::Clock::now();
  auto missing = [&] {
    std::vector<int> m;
    for (int p : peers) {
      if (p != cfg_.rank && !channels_.count(p)) m.push_back(p);
    }
    return m;
  };
  if (missing().empty()) return;

  // Dial every missing higher rank and send our Hello; the kernel completes the TCP
  // handshake from the peer's listen backlog even before the peer looks at it.
  for (int p : missing()) {
    if (p < cfg_.rank) continue;
    bool dialled = false;
    for (const auto& q : pending_) dialled |= (q->outgoing && q->peer == p);
    if (dialled) continue;
    const std::string key = addrKey(p);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline.isNever()
            ? std::chrono::hours(24 * 365)
            : std::max(Deadline::Clock::duration::zero(), deadline.at() - Deadline::Clock::now()));
    try {
      store_->wait({key}, left);
    } catch (const Error& e) {
      ErrorInfo info;
      info.kind = ErrorKind::Timeout;
      info.rank = cfg_.rank;
      info.peer = p;
      info.message = "rank " + std::to_string(p) + " never published its address: " + e.cause();
      throwError(std::move(info));
    }
    std::string addr = publishedAddress(p);
    auto [host, port] = net::splitHostPort(addr);
    net::Fd fd;
    try {
      // The address was published after listen(): a refusal means the peer is gone.
      fd = net::connectWithRetry(host, port, deadline, /*retryRefused=*/false);
    } catch (Error& e) {
      ErrorInfo info = e.info();
      info.rank = cfg_.rank;
      info.peer = p;
      throwError(std::move(info));
    }
    wire::Hello h;
    h.jobId = cfg_.jobId;
    h.commId = cfg_.commId;
    h.rank = cfg_.rank;
    h.worldSize = cfg_.worldSize;
    h.targetRank = p;
    uint8_t out[wire::kHelloSize];
    wire::encodeHello(h, out);
    if (net::sendAll(fd.get(), out, sizeof out, deadline) != net::IoStatus::Ok) {
      throwError(ErrorKind::PeerClosed, "could not send the handshake to " + addr, cfg_.rank, p);
    }
    auto pend = std::make_unique<Pending>();
    pend->fd = std::move(fd);
    pend->address = addr;
    pend->outgoing = true;
    pend->peer = p;
    pend->since = Deadline::Clock::now();
    pending_.push_back(std::move(pend));
  }

  // Serve the listener, the incoming Hellos and the outgoing replies until every
  // needed peer is connected.
  for (;;) {
    // Drop finished and stale entries.
    auto now = Deadline::Clock::now();
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = *pending_[i];
      bool done = service(p);
      if (!done && !p.outgoing && now - p.since > kStrangerGrace) {
        TCCL_WARN("dropping a connection from " << p.address << " that sent no handshake in "
                                                << kStrangerGrace.count() << " s");
        done = true;
      }
      if (done) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    std::vector<int> m = missing();
    if (m.empty()) return;
    if (deadline.expired()) {
      ErrorInfo info;
      info.kind = ErrorKind::Timeout;
      info.rank = cfg_.rank;
      info.peer = m.front();
      info.peerAddress = publishedAddress(m.front());
      std::ostringstream os;
      os << "could not connect to rank(s)";
      for (int p : m) os << " " << p;
      os << " (lower ranks dial higher ones; the missing peers never completed the handshake)";
      info.message = os.str();
      info.elapsedMs =
          std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start)
              .count();
      throwError(std::move(info));
    }
    std::vector<pollfd> fds;
    fds.push_back({listener_.get(), POLLIN, 0});
    for (const auto& p : pending_) fds.push_back({p->fd.get(), POLLIN, 0});
    int timeout = deadline.pollTimeoutMs();
    if (timeout < 0 || timeout > 1000) timeout = 1000;  // wake to expire strangers
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      throwError(ErrorKind::System, "poll: " + net::errnoString(errno), cfg_.rank);
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
      for (;;) {
        net::SockAddr from;
        net::Fd fd = net::acceptNonBlocking(listener_.get(), &from);
        if (!fd.valid()) break;
        auto pend = std::make_unique<Pending>();
        pend->fd = std::move(fd);
        pend->address = from.toString();
        pend->since = Deadline::Clock::now();
        pending_.push_back(std::move(pend));
      }
    }
  }
}

}  // namespace tccl
