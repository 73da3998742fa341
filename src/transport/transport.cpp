#include "transport/transport.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>

#include "base/log.hpp"
#include "net/iface.hpp"
#include "tccl/error.hpp"
#include "transport/striped_link.hpp"
#include "transport/tcp_link.hpp"
#include "transport/transport_detail.hpp"

namespace tccl {
using namespace transport_detail;

Transport::Transport(TransportConfig config, std::shared_ptr<Store> store)
    : cfg_(std::move(config)), store_(std::move(store)) {
  if (cfg_.authKeyFromEnv) cfg_.authKey = auth::keyFromEnv();
  listener_ = net::listenOn(cfg_.listenAddress, 0);
  net::SockAddr a = net::localAddress(listener_.get());
  listenAddr_ = net::joinHostPort(a.ip(), a.port());
  // Secure by default (docs/security.md): no listener beyond the loopback without a key.
  auth::requireKeyToListen(cfg_.authKey != nullptr, !net::boundToLoopback(listener_.get()),
                           "rank " + std::to_string(cfg_.rank), listenAddr_, cfg_.rank);
  serviceWake_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!serviceWake_.valid()) {
    throwError(ErrorKind::System, "eventfd: " + net::errnoString(errno), cfg_.rank);
  }
  service_ = std::thread([this] { serviceLoop(); });
  store_->setString(addrKey(cfg_.rank), listenAddr_);
  TCCL_INFO("listening on " << listenAddr_
                            << (cfg_.authKey ? " (connections authenticated, key id " +
                                                   cfg_.authKey->id() + ")"
                                             : std::string(" (connections not authenticated)")));
}

Transport::Transport(TransportConfig config, std::shared_ptr<Store> store,
                     std::shared_ptr<Transport> hub)
    : cfg_(std::move(config)), store_(std::move(store)), hub_(std::move(hub)) {
  if (cfg_.authKeyFromEnv) cfg_.authKey = auth::keyFromEnv();
  listenAddr_ = hub_->listenAddr_;
  {
    std::lock_guard<std::mutex> lk(hub_->childMu_);
    hub_->children_.push_back(this);
  }
  // Registered before the address is published: a peer dials this child only once it
  // read the address, so the hub never sees the child's Hello before it can route it.
  store_->setString(addrKey(cfg_.rank), listenAddr_);
  TCCL_INFO("sub-communicator rank " << cfg_.rank << "/" << cfg_.worldSize
                                     << " shares the listener at " << listenAddr_);
}

size_t Transport::attachedChildren() const {
  std::lock_guard<std::mutex> lk(childMu_);
  return children_.size();
}

Transport::~Transport() {
  if (hub_) {
    // Unregistered first: after this the hub's service thread neither routes to this
    // child nor services its pending connections.
    std::lock_guard<std::mutex> lk(hub_->childMu_);
    std::erase(hub_->children_, this);
  }
  stopping_.store(true);
  if (serviceWake_.valid()) {
    const uint64_t one = 1;
    const ssize_t w = ::write(serviceWake_.get(), &one, sizeof one);
    (void)w;
  }
  if (service_.joinable()) service_.join();
  for (std::thread& t : dialers_) {
    if (t.joinable()) t.join();
  }
  // Connections still in their handshake are strangers (every peer this rank needed got
  // in): read what they sent since, once, so that each leaves a line naming its address.
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& p : pending_) {
    if (p->outgoing || !p->fd.valid()) continue;
    try {
      if (service(*p)) continue;
    } catch (...) {
    }
    warnStranger("closing a connection from " + p->address +
                 " that never finished its handshake (" +
                 (p->stage == Stage::AwaitProof ? "no proof" : "no hello") + ")");
  }
  if (strangerEvents_ > kStrangerLines || evicted_ > 0) {
    TCCL_WARN("listener " << listenAddr_ << " refused or dropped " << strangerEvents_
                          << " connection(s) in all, and closed " << evicted_
                          << " more in their handshake to stay within TCCL_LISTEN_MAX_PENDING or "
                             "the descriptor limit");
  }
}

Link& Transport::link(int peer, Lane lane) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = links_.find({peer, lane});
  if (it == links_.end()) {
    throwError(ErrorKind::InvalidArgument,
               "no " + std::string(laneName(lane)) + " connection to rank " + std::to_string(peer),
               cfg_.rank, peer);
  }
  return *it->second;
}

bool Transport::connected(int peer, Lane lane) const {
  std::lock_guard<std::mutex> lk(mu_);
  return hasLink(peer, lane);
}

std::string Transport::publishedAddress(int peer, Store* via) const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = published_.find(peer);
    if (it != published_.end()) return it->second;
  }
  // The store is asked without the lock: it may be slow, and another thread may be
  // connecting meanwhile.
  Store& st = via != nullptr ? *via : *store_;
  if (!st.check({addrKey(peer)})) return "";
  std::string addr = st.getString(addrKey(peer));
  std::lock_guard<std::mutex> lk(mu_);
  return published_.emplace(peer, std::move(addr)).first->second;
}

CommStats Transport::stats() const {
  std::vector<std::pair<int, PeerCounters>> byPeer;
  countersByPeer(byPeer);
  CommStats s;
  for (const auto& [peer, c] : byPeer) s.perPeer.emplace_hint(s.perPeer.end(), peer, c);
  return s;
}

void Transport::countersByPeer(std::vector<std::pair<int, PeerCounters>>& out) const {
  out.clear();
  std::lock_guard<std::mutex> lk(mu_);
  // links_ is ordered by (peer, lane): a peer's lanes are neighbours.
  for (const auto& [key, l] : links_) {
    if (out.empty() || out.back().first != key.first) out.emplace_back(key.first, PeerCounters{});
    out.back().second += l->counters().snapshot();
  }
}

void Transport::resetStats() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [key, l] : links_) l->counters().reset();
}

void Transport::closeAll(Lane lane) {
  std::lock_guard<std::mutex> lk(mu_);
  closeAllLocked(lane);
}

void Transport::closeAllLocked(Lane lane) {
  // Half-close: the peers read whatever we already sent (so a peer that is about to
  // report a mismatch still sees our header), then end-of-file. A full close with
  // unread input would send a reset that discards that data. The descriptors close
  // with the transport.
  if (lane == Lane::Collective) collectiveVersion_.fetch_add(1, std::memory_order_acq_rel);
  for (auto& [key, l] : links_) {
    if (key.second == lane) l->shutdownWrite();
  }
  if (lane == Lane::Collective) assembling_.clear();
  std::erase_if(pending_, [&](const std::unique_ptr<Pending>& p) { return p->lane == lane; });
}

void Transport::throwInterrupted(int peer) const {
  ErrorInfo info;
  info.kind = ErrorKind::Aborted;
  info.rank = cfg_.rank;
  info.peer = peer;
  info.phase = "connect";
  info.message = "the communicator was aborted while connecting";
  throwError(std::move(info));
}

void Transport::abortAll(const wire::MessageHeader& abortHeader, Lane lane) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [key, l] : links_) {
    if (key.second != lane || !l->open() || l->txPartial) continue;
    // 24 bytes into a socket whose buffer has room: all or nothing in practice; a
    // short write leaves the peer a truncated header, which it reports as a protocol
    // error at end-of-file, so nothing is lost but the culprit hint.
    TxFrame tx;
    tx.start(abortHeader, nullptr);
    (void)tx.pump(*l);
  }
  closeAllLocked(lane);
}

std::vector<int> Transport::connectedPeers(Lane lane) const {
  std::vector<int> peers;
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [key, l] : links_) {
    if (key.second == lane && l->open()) peers.push_back(key.first);
  }
  return peers;
}

void Transport::addLink(Pending& p) {
  net::setBufferSizes(p.fd.get(), cfg_.socketBufferBytes, cfg_.socketBufferBytes);
  if (cfg_.socketBufferBytes == 0 && cfg_.sameHostSendBuffer > 0 && p.lane == Lane::Collective &&
      net::sameHost(p.fd.get())) {
    net::setBufferSizes(p.fd.get(), cfg_.sameHostSendBuffer, 0);
  }
  if (cfg_.socketBufferBytes == 0 && cfg_.sameHostP2PBuffer > 0 && p.lane == Lane::P2P &&
      net::sameHost(p.fd.get())) {
    net::setBufferSizes(p.fd.get(), cfg_.sameHostP2PBuffer, cfg_.sameHostP2PBuffer);
  }
  // A peer host that vanishes without a FIN fails the link, heartbeats or not.
  net::setDeadPeerTimeout(p.fd.get(), cfg_.deadPeerTimeout);
  std::unique_ptr<Link> l = std::make_unique<TcpLink>(p.peer, p.lane, p.address, std::move(p.fd));
  PeerCounters handshake;
  handshake.wireSent = p.bytesSent;
  handshake.wireRecv = p.bytesRecv;
  const int k = socketsPerPeer(p.lane);
  if (k > 1) {
    // One of the peer's nsocks connections: the link is made once all are in.
    Assembly& a = assembling_[p.peer];
    a.stripes.resize(static_cast<size_t>(k));
    a.stripes[static_cast<size_t>(p.stripe)] = std::move(l);
    a.handshake += handshake;
    if (++a.have < k) return;
    handshake = a.handshake;
    l = std::make_unique<StripedLink>(p.peer, p.lane, a.stripes[0]->address(), std::move(a.stripes),
                                      cfg_.stripeMinBytes);
    assembling_.erase(p.peer);
  }
  l->counters().add(handshake);
  TCCL_INFO("connected to rank " << p.peer << " at " << l->address()
                                 << (p.lane == Lane::P2P ? " (p2p lane)" : "")
                                 << (k > 1 ? " (" + std::to_string(k) + " sockets)" : "")
                                 << (cfg_.authKey ? " (authenticated)" : ""));
  links_[{p.peer, p.lane}] = std::move(l);
  if (p.lane == Lane::Collective) collectiveVersion_.fetch_add(1, std::memory_order_acq_rel);
  wakeOthers(-1);
  if (p.lane == Lane::P2P) signalLinkEvent();
}

void Transport::wakeOthers(int selfFd) {
  const uint64_t one = 1;
  for (int fd : waiters_) {
    if (fd == selfFd) continue;
    const ssize_t r = ::write(fd, &one, sizeof one);
    (void)r;
  }
}

bool Transport::haveConnection(int peer, Lane lane, int stripe) const {
  if (hasLink(peer, lane)) return true;
  if (socketsPerPeer(lane) == 1) return false;
  auto it = assembling_.find(peer);
  return it != assembling_.end() && static_cast<size_t>(stripe) < it->second.stripes.size() &&
         it->second.stripes[static_cast<size_t>(stripe)] != nullptr;
}

wire::Hello Transport::myHello(wire::HelloKind kind, int target, uint32_t laneField) const {
  wire::Hello h;
  h.kind = kind;
  h.jobId = cfg_.jobId;
  h.commId = cfg_.commId;
  h.rank = cfg_.rank;
  h.worldSize = cfg_.worldSize;
  h.targetRank = target;
  h.flags = cfg_.authKey ? wire::kHelloFlagAuth : 0;
  h.lane = laneField;
  return h;
}

bool Transport::sendHello(Pending& p, const wire::Hello& h) {
  uint8_t out[wire::kHelloSize];
  wire::encodeHello(h, out);
  net::IoStatus st =
      net::sendAll(p.fd.get(), out, sizeof out, Deadline::after(std::chrono::milliseconds(1000)));
  if (st != net::IoStatus::Ok) return false;
  p.bytesSent += sizeof out;
  return true;
}

bool Transport::rejectIncoming(Pending& p, wire::RejectReason reason, const std::string& detail) {
  wire::Hello reply = myHello(wire::HelloKind::Reject, -1, p.laneField);
  reply.reason = reason;
  sendHello(p, reply);
  if (reason == wire::RejectReason::Duplicate && p.lane == Lane::P2P) {
    // Two ranks dialling each other for point to point at once: routine.
    TCCL_INFO("refused a crossed p2p dial from " << p.address << detail);
  } else {
    warnStranger("rejected a connection from " + p.address + ": " +
                 std::string(wire::toString(reason)) + detail);
  }
  // Read what the stranger already sent (a bounded amount: it may keep sending), so that
  // closing with unread input does not reset the connection before it reads our Reject.
  uint8_t sink[4096];
  for (int i = 0; i < 16 && ::recv(p.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
  return true;  // p.fd closes when the pending entry is dropped
}

void Transport::refuseOutgoing(Pending& p, wire::RejectReason tell, const std::string& why) {
  if (tell != wire::RejectReason::None) {
    wire::Hello r = myHello(wire::HelloKind::Reject, p.peer, p.laneField);
    r.reason = tell;
    sendHello(p, r);
  }
  ErrorInfo info;
  info.kind = ErrorKind::Handshake;
  info.rank = cfg_.rank;
  info.peer = p.peer;
  info.peerAddress = p.address;
  info.message = why;
  throwError(std::move(info));
}

void Transport::noteRefusal(int claimedRank, const std::string& address, std::string_view why) {
  if (claimedRank < 0 || claimedRank >= cfg_.worldSize || claimedRank == cfg_.rank) return;
  refused_[claimedRank] = address + ": " + std::string(why);
}

bool Transport::onIncoming(Pending& p, const wire::Hello& h) {
  const bool iHaveKey = cfg_.authKey != nullptr;
  if (p.stage == Stage::AwaitHello) {
    if (!hub_ && h.jobId == cfg_.jobId && h.commId != cfg_.commId) {
      // Meant for a sub-communicator of this process: its handshake and link are its own.
      if (routeToChild(p, h)) return true;  // the moved-from entry is dropped
    }
    wire::RejectReason reason =
        wire::checkHello(h, cfg_.jobId, cfg_.commId, cfg_.rank, cfg_.worldSize);
    const Lane lane = static_cast<Lane>(wire::laneOf(h.lane));  // checkHello: 0 or 1
    const int stripe = wire::stripeOf(h.lane);
    p.laneField = h.lane;
    if (reason == wire::RejectReason::None) {
      if (lane == Lane::Collective && h.rank > cfg_.rank) {
        reason = wire::RejectReason::BadRank;  // on this lane only lower ranks dial us
      } else if (wire::stripesOf(h.lane) != socketsPerPeer(lane)) {
        reason = wire::RejectReason::NsocksDiffers;  // only the collectives' lane stripes
      } else if (haveConnection(h.rank, lane, stripe) || lostCrossedDial(h.rank, lane)) {
        reason = wire::RejectReason::Duplicate;
      }
    }
    const bool peerHasKey = (h.flags & wire::kHelloFlagAuth) != 0;
    if (reason == wire::RejectReason::None && iHaveKey && !peerHasKey) {
      reason = wire::RejectReason::AuthRequired;
    }
    if (reason == wire::RejectReason::None && !iHaveKey && peerHasKey) {
      reason = wire::RejectReason::AuthUnsupported;
    }
    if (reason != wire::RejectReason::None) {
      std::string detail;
      if (reason == wire::RejectReason::AuthRequired) {
        detail = " (rank " + std::to_string(h.rank) + " there has no key)";
      } else if (reason == wire::RejectReason::AuthUnsupported) {
        detail = " (rank " + std::to_string(h.rank) + " there has a key; this rank has none)";
      } else if (reason == wire::RejectReason::BadLane) {
        detail = " (lane " + std::to_string(h.lane) + ")";
      } else if (reason == wire::RejectReason::Duplicate) {
        detail = " (" + std::string(laneName(lane)) + " lane)";
      }
      if (reason == wire::RejectReason::NsocksDiffers) {
        const std::string why =
            nsocksDiffer(h.rank, wire::stripesOf(h.lane), cfg_.rank, socketsPerPeer(lane));
        detail = " (" + why.substr(0, why.find(':')) + ")";  // the reason says what to do
        nsocksRefused_[h.rank] = why + "; its connection from " + p.address + " was refused";
        p.laneField = wire::laneField(static_cast<uint32_t>(lane), 0, socketsPerPeer(lane));
      }
      noteRefusal(h.rank, p.address, wire::toString(reason));
      p.lane = lane;
      return rejectIncoming(p, reason, detail);
    }
    p.peer = h.rank;
    p.lane = lane;
    p.stripe = stripe;
    if (!iHaveKey) {
      if (!sendHello(p, myHello(wire::HelloKind::Accept, h.rank, p.laneField))) {
        TCCL_WARN("rank " << h.rank << " at " << p.address << " went away during the handshake");
        return true;
      }
      addLink(p);
      return true;
    }
    p.transcript.protocol = auth::Protocol::Transport;
    p.transcript.jobId = cfg_.jobId;
    p.transcript.commId = cfg_.commId;
    p.transcript.dialler = h.rank;
    p.transcript.acceptor = cfg_.rank;
    p.transcript.worldSize = cfg_.worldSize;
    p.transcript.diallerNonce = h.nonce;
    p.transcript.acceptorNonce = auth::randomNonce();
    wire::Hello challenge = myHello(wire::HelloKind::Challenge, h.rank, p.laneField);
    challenge.nonce = p.transcript.acceptorNonce;
    challenge.mac = auth::proof(*cfg_.authKey, auth::Role::Acceptor, p.transcript);
    if (!sendHello(p, challenge)) {
      TCCL_WARN("rank " << h.rank << " at " << p.address << " went away during the handshake");
      return true;
    }
    p.stage = Stage::AwaitProof;
    return false;
  }
  // AwaitProof.
  if (h.kind == wire::HelloKind::Reject) {
    TCCL_WARN("rank " << p.peer << " at " << p.address
                      << " refused this rank's challenge: " << wire::toString(h.reason));
    noteRefusal(p.peer, p.address,
                "it refused this rank's challenge: " + std::string(wire::toString(h.reason)));
    return true;
  }
  if (h.kind != wire::HelloKind::Proof || h.version != wire::kProtocolVersion) {
    return rejectIncoming(p, wire::RejectReason::Unexpected, " (expected a proof)");
  }
  if (!auth::verify(*cfg_.authKey, auth::Role::Dialler, p.transcript, h.mac)) {
    noteRefusal(p.peer, p.address, wire::toString(wire::RejectReason::AuthFailed));
    return rejectIncoming(p, wire::RejectReason::AuthFailed,
                          " (claimed to be rank " + std::to_string(p.peer) + ")");
  }
  if (haveConnection(p.peer, p.lane, p.stripe) || lostCrossedDial(p.peer, p.lane)) {
    return rejectIncoming(p, wire::RejectReason::Duplicate,
                          " (" + std::string(laneName(p.lane)) + " lane)");
  }
  if (!sendHello(p, myHello(wire::HelloKind::Accept, p.peer, p.laneField))) {
    TCCL_WARN("rank " << p.peer << " at " << p.address << " went away during the handshake");
    return true;
  }
  addLink(p);
  return true;
}

bool Transport::lostCrossedDial(int peer, Lane lane) const {
  // Both ranks of a pair dialled each other on the p2p lane: the lower rank's dial wins,
  // so the lower rank refuses the higher one's while its own is under way.
  if (lane != Lane::P2P || peer < cfg_.rank) return false;
  if (dialling_.count(peer)) return true;
  for (const auto& q : pending_) {
    if (q->outgoing && q->peer == peer && q->lane == Lane::P2P) return true;
  }
  return false;
}

bool Transport::onOutgoing(Pending& p, const wire::Hello& h) {
  if (h.kind == wire::HelloKind::Reject && p.lane == Lane::P2P &&
      h.reason == wire::RejectReason::Duplicate) {
    // A crossed dial: the peer's own connection (it is the lower rank, or it already has
    // one) is the pair's p2p link; it arrives through the listener.
    TCCL_INFO("p2p dial to rank " << p.peer << " crossed the peer's own; keeping the peer's");
    return true;
  }
  if (h.kind == wire::HelloKind::Reject && h.reason == wire::RejectReason::NsocksDiffers) {
    refuseOutgoing(
        p, wire::RejectReason::None,
        "connection refused by the peer: " +
            nsocksDiffer(p.peer, wire::stripesOf(h.lane), cfg_.rank, socketsPerPeer(p.lane)));
  }
  if (h.kind == wire::HelloKind::Reject) {
    refuseOutgoing(p, wire::RejectReason::None,
                   "connection refused by the peer: " + std::string(wire::toString(h.reason)));
  }
  // Whatever it says, the reply must come from the rank we dialled, in this job.
  if (h.version != wire::kProtocolVersion || h.rank != p.peer || h.jobId != cfg_.jobId ||
      h.commId != cfg_.commId || h.targetRank != cfg_.rank || h.worldSize != cfg_.worldSize ||
      h.lane != p.laneField) {
    refuseOutgoing(p, wire::RejectReason::Unexpected,
                   "unexpected handshake reply (rank " + std::to_string(h.rank) + ", kind " +
                       std::to_string(static_cast<int>(h.kind)) + ")");
  }
  const bool iHaveKey = cfg_.authKey != nullptr;
  if (p.stage == Stage::AwaitReply && h.kind == wire::HelloKind::Challenge) {
    if (!iHaveKey) {
      refuseOutgoing(p, wire::RejectReason::AuthUnsupported,
                     "the peer demands authentication and this rank has no key (set "
                     "TCCL_AUTH_KEY or TCCL_AUTH_KEY_FILE the same on every rank)");
    }
    p.transcript.acceptorNonce = h.nonce;
    if (!auth::verify(*cfg_.authKey, auth::Role::Acceptor, p.transcript, h.mac)) {
      refuseOutgoing(p, wire::RejectReason::AuthFailed,
                     "authentication failed: the process at this address does not hold this "
                     "job's key (another job, or a different TCCL_AUTH_KEY)");
    }
    wire::Hello proofMsg = myHello(wire::HelloKind::Proof, p.peer, p.laneField);
    proofMsg.mac = auth::proof(*cfg_.authKey, auth::Role::Dialler, p.transcript);
    if (!sendHello(p, proofMsg)) {
      refuseOutgoing(p, wire::RejectReason::None, "connection lost during the handshake");
    }
    p.stage = Stage::AwaitVerdict;
    return false;
  }
  if (h.kind == wire::HelloKind::Accept) {
    if (iHaveKey && p.stage != Stage::AwaitVerdict) {
      // An acceptor with a key challenges; one without must refuse our flagged Hello.
      refuseOutgoing(p, wire::RejectReason::AuthRequired,
                     "the peer accepted without proving it holds this job's key");
    }
    addLink(p);
    return true;
  }
  refuseOutgoing(
      p, wire::RejectReason::Unexpected,
      "unexpected handshake message (kind " + std::to_string(static_cast<int>(h.kind)) + ")");
}

bool Transport::service(Pending& p) {
  for (;;) {
    // A message is read in two parts: the 8-byte prefix (magic, version, kind) judges
    // the sender at once; the rest follows when the version is ours.
    const size_t want = p.got < wire::kHelloPrefixSize ? wire::kHelloPrefixSize : wire::kHelloSize;
    ssize_t n = ::recv(p.fd.get(), p.buf + p.got, want - p.got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) {
      // Closed or reset in the middle of the handshake.
      if (p.outgoing) {
        ErrorInfo info;
        info.kind = ErrorKind::PeerClosed;
        info.rank = cfg_.rank;
        info.peer = p.peer;
        info.peerAddress = p.address;
        info.message = "connection closed during the handshake (the peer refused or died)";
        throwError(std::move(info));
      }
      warnStranger("a connection from " + p.address + " closed during the handshake after " +
                   std::to_string(p.bytesRecv + p.got) + " bytes; ignored");
      return true;
    }
    p.got += static_cast<size_t>(n);
    uint16_t version = wire::kProtocolVersion;
    if (!wire::plausibleHelloPrefix(p.buf, p.got, &version)) {
      if (p.outgoing) {
        refuseOutgoing(p, wire::RejectReason::None,
                       "the process at this address did not answer like a tccl peer");
      }
      return rejectIncoming(p, wire::RejectReason::BadMagic);
    }
    if (p.got == wire::kHelloPrefixSize && version != wire::kProtocolVersion) {
      const std::string why = "it speaks handshake protocol version " + std::to_string(version) +
                              ", this rank speaks " + std::to_string(wire::kProtocolVersion) +
                              " (mixed tccl versions)";
      if (p.outgoing) refuseOutgoing(p, wire::RejectReason::None, "the peer refused: " + why);
      return rejectIncoming(p, wire::RejectReason::BadVersion, " (" + why + ")");
    }
    if (p.got < wire::kHelloSize) continue;
    p.bytesRecv += p.got;
    p.got = 0;
    wire::Hello h;
    if (wire::decodeHello(p.buf, &h) != wire::DecodeStatus::Ok) {
      if (p.outgoing) {
        refuseOutgoing(p, wire::RejectReason::Unexpected,
                       "the peer sent a handshake message of unknown kind");
      }
      return rejectIncoming(p, wire::RejectReason::Unexpected, " (unknown message kind)");
    }
    if (p.outgoing ? onOutgoing(p, h) : onIncoming(p, h)) return true;
  }
}

std::unique_ptr<Transport::Pending> Transport::dial(int peer, Lane lane, Deadline deadline,
                                                    int stripe) {
  const std::string addr = publishedAddress(peer);
  auto [host, port] = net::splitHostPort(addr);
  auto pend = std::make_unique<Pending>();
  // The address was published after listen(): a refusal means the peer is gone.
  pend->fd = net::connectWithRetry(host, port, deadline, /*retryRefused=*/false);
  pend->address = addr;
  pend->outgoing = true;
  pend->peer = peer;
  pend->lane = lane;
  pend->stripe = stripe;
  pend->laneField = wire::laneField(static_cast<uint32_t>(lane), stripe, socketsPerPeer(lane));
  pend->stage = Stage::AwaitReply;
  pend->since = Deadline::Clock::now();
  wire::Hello h = myHello(wire::HelloKind::Hello, peer, pend->laneField);
  if (cfg_.authKey) {
    pend->transcript.protocol = auth::Protocol::Transport;
    pend->transcript.jobId = cfg_.jobId;
    pend->transcript.commId = cfg_.commId;
    pend->transcript.dialler = cfg_.rank;
    pend->transcript.acceptor = peer;
    pend->transcript.worldSize = cfg_.worldSize;
    pend->transcript.diallerNonce = auth::randomNonce();
    h.nonce = pend->transcript.diallerNonce;
  }
  uint8_t out[wire::kHelloSize];
  wire::encodeHello(h, out);
  if (net::sendAll(pend->fd.get(), out, sizeof out, deadline) != net::IoStatus::Ok) {
    throwError(ErrorKind::PeerClosed, "could not send the handshake to " + addr, cfg_.rank, peer);
  }
  pend->bytesSent += sizeof out;
  return pend;
}

bool Transport::awaitAddress(int peer, Deadline deadline, const std::function<bool()>& stop) {
  const std::string key = addrKey(peer);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline.isNever()
          ? std::chrono::hours(24 * 365)
          : std::max(Deadline::Clock::duration::zero(), deadline.at() - Deadline::Clock::now()));
  // Poll rather than block in the store, so that an abort can interrupt the wait.
  for (auto pause = std::chrono::milliseconds(1); !store_->check({key});
       pause = std::min(pause * 2, std::chrono::milliseconds(20))) {
    if (stop()) return false;
    if (deadline.expired()) {
      ErrorInfo info;
      info.kind = ErrorKind::Timeout;
      info.rank = cfg_.rank;
      info.peer = peer;
      info.timeoutMs = left.count();
      info.message = "rank " + std::to_string(peer) +
                     " never published its address (missing store key " + key + ")";
      throwError(std::move(info));
    }
    std::this_thread::sleep_for(pause);
  }
  return true;
}

ErrorInfo Transport::connectTimeout(const std::vector<int>& missing, Lane lane,
                                    Deadline::Clock::time_point start) const {
  ErrorInfo info;
  info.kind = ErrorKind::Timeout;
  info.rank = cfg_.rank;
  info.peer = missing.front();
  std::ostringstream os;
  os << "could not connect to rank(s)";
  for (int p : missing) os << " " << p;
  if (lane == Lane::P2P) os << " on the p2p lane";
  os << " (lower ranks dial higher ones; the missing peers never completed the handshake)";
  for (int p : missing) {
    auto a = assembling_.find(p);
    if (lane == Lane::Collective && a != assembling_.end()) {
      os << "; rank " << p << " made " << a->second.have << " of its " << cfg_.nsocks
         << " connections (TCCL_NSOCKS)";
    }
    auto r = refused_.find(p);
    if (r != refused_.end()) {
      os << "; a connection claiming to be rank " << p << " was refused: " << r->second;
    }
  }
  info.message = os.str();
  info.elapsedMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start).count();
  return info;
}

void Transport::connect(const std::vector<int>& peers, Deadline deadline, Lane lane) {
  auto start = Deadline::Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  auto missing = [&] {  // with lk held
    std::vector<int> m;
    for (int p : peers) {
      if (p != cfg_.rank && !hasLink(p, lane)) m.push_back(p);
    }
    return m;
  };
  if (missing().empty()) return;

  // The addresses of the higher peers to dial: all of them in two requests (a CHECK
  // and a MULTI_GET) when they are all published, as they usually are by now, so that a
  // rank's store requests do not grow with its number of peers; else peer by peer below.
  {
    std::vector<std::string> keys;
    std::vector<int> whose;
    for (int p : missing()) {
      if (p > cfg_.rank && published_.count(p) == 0) {
        keys.push_back(addrKey(p));
        whose.push_back(p);
      }
    }
    if (keys.size() > 1) {
      lk.unlock();
      std::vector<Bytes> values;
      try {
        if (store_->check(keys)) values = store_->multiGet(keys, std::chrono::milliseconds(1000));
      } catch (const Error&) {
        values.clear();  // the peer-by-peer path below waits, and names what is missing
      }
      lk.lock();
      for (size_t i = 0; i < values.size(); ++i) {
        published_.emplace(whose[i], std::string(values[i].begin(), values[i].end()));
      }
    }
  }
  // Dial every missing higher rank and send our Hello; the kernel completes the TCP
  // handshake from the peer's listen backlog even before the peer looks at it. The
  // waits here (the store, the dial) run without the lock.
  for (int p : missing()) {
    if (p < cfg_.rank) continue;
    // Every connection of the peer's link (nsocks on the collectives' lane), in stripe
    // order, each with its own Hello (and proof).
    for (int stripe = 0; stripe < socketsPerPeer(lane); ++stripe) {
      bool dialled = haveConnection(p, lane, stripe);
      for (const auto& q : pending_) {
        dialled |= (q->outgoing && q->peer == p && q->lane == lane && q->stripe == stripe);
      }
      if (dialled) continue;
      const bool known = published_.count(p) != 0;
      lk.unlock();
      if (!known &&
          !awaitAddress(p, deadline, [this] { return abortFlag_ && abortFlag_->load(); })) {
        throwInterrupted(p);
      }
      std::unique_ptr<Pending> pend;
      try {
        pend = dial(p, lane, deadline, stripe);
      } catch (Error& e) {
        ErrorInfo info = e.info();
        info.rank = cfg_.rank;
        info.peer = p;
        throwError(std::move(info));
      }
      lk.lock();
      pending_.push_back(std::move(pend));
    }
  }

  // Serve the listener, the incoming Hellos (of either lane) and this lane's outgoing
  // replies until every needed peer is connected. Another thread connecting the other
  // lane may make a link this one waits for, or accept a connection it should watch:
  // it then writes this thread's eventfd.
  net::Fd myWake;
  struct Unregister {
    Transport& t;
    std::unique_lock<std::mutex>& lk;
    const net::Fd& fd;
    ~Unregister() {
      if (!fd.valid()) return;
      if (!lk.owns_lock()) lk.lock();
      t.waiters_.erase(fd.get());
    }
  } unregister{*this, lk, myWake};
  for (;;) {
    // Drop finished and stale entries.
    auto now = Deadline::Clock::now();
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = *pending_[i];
      if (p.outgoing && p.lane != lane) {
        ++i;  // the other lane's thread hears its own refusals
        continue;
      }
      bool done = service(p);
      if (!done && expired(p, now)) done = true;
      p.seen = true;
      if (done) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    std::vector<int> m = missing();
    if (m.empty()) return;
    for (int p : m) {
      auto r = nsocksRefused_.find(p);
      if (lane != Lane::Collective || r == nsocksRefused_.end()) continue;
      ErrorInfo info;
      info.kind = ErrorKind::Handshake;
      info.rank = cfg_.rank;
      info.peer = p;
      info.message = r->second;
      lk.unlock();
      info.peerAddress = publishedAddress(p);
      throwError(std::move(info));
    }
    if (deadline.expired()) {
      ErrorInfo info = connectTimeout(m, lane, start);
      lk.unlock();
      info.peerAddress = publishedAddress(m.front());
      throwError(std::move(info));
    }
    if (abortFlag_ && abortFlag_->load()) throwInterrupted(m.front());
    if (!myWake.valid()) {
      myWake = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
      if (!myWake.valid()) {
        throwError(ErrorKind::System, "eventfd: " + net::errnoString(errno), cfg_.rank);
      }
      waiters_.insert(myWake.get());
    }
    std::vector<pollfd> fds;
    // A child has no listener: its hub's service thread accepts and routes for it. The
    // listener's descriptor is -1 (ignored by poll) while accepts pause.
    const bool listens = listener_.valid();
    if (listens) fds.push_back({listenerPollFd(), POLLIN, 0});
    for (const auto& p : pending_) {
      if (!p->outgoing || p->lane == lane) fds.push_back({p->fd.get(), POLLIN, 0});
    }
    if (wakeFd_ >= 0) fds.push_back({wakeFd_, POLLIN, 0});
    fds.push_back({myWake.get(), POLLIN, 0});
    int timeout = deadline.pollTimeoutMs();
    if (timeout < 0 || timeout > 1000) timeout = 1000;  // wake to expire strangers
    timeout = capPollTimeout(timeout);
    // Without the lock: the other lane's thread goes on meanwhile (a descriptor it
    // closes under this poll only makes it return early).
    lk.unlock();
    int n = ::poll(fds.data(), fds.size(), timeout);
    const int err = errno;
    lk.lock();
    if (n < 0 && err != EINTR) {
      throwError(ErrorKind::System, "poll: " + net::errnoString(err), cfg_.rank);
    }
    if (n > 0 && fds.back().revents != 0) {
      uint64_t v = 0;
      const ssize_t r = ::read(myWake.get(), &v, sizeof v);
      (void)r;
    }
    if (n > 0 && listens && (fds[0].revents & POLLIN)) {
      const size_t before = pending_.size();
      acceptAll();
      // A thread waiting for another lane watches the new connections too.
      if (pending_.size() != before) wakeOthers(myWake.get());
    }
  }
}

}  // namespace tccl
