// The transport: one listening socket per process family of communicators, and at most
// one TCP connection per peer and lane, opened lazily when an algorithm (lane Collective)
// or the point-to-point engine (lane P2P) first needs that peer.
//
// Sub-communicators (Communicator::split, shrink): a child's transport is attached to its
// family's root transport (the hub), the one made by the Communicator constructor. It has
// no listener and no service thread of its own: it publishes the hub's address, and the
// hub's listener and service thread accept every connection, read its Hello, and hand a
// connection whose communicator id (Hello bytes 16-23) is a registered child's to that
// child, which runs the rest of the handshake and owns the link. So a process holds one
// listener and one service thread however many communicators it has (docs/protocol.md,
// "Sub-communicators"). Lock order: the hub's mu_, then childMu_, then a child's mu_.
//
// Connection rule: the lower rank connects, the higher rank accepts. The listener's
// address is published in the store under "addr/<rank>". Every connection begins with
// the Hello exchange of wire.hpp, whose lane field says which connection of the pair it
// is; a stranger (bad magic, other job, other communicator, wrong world size, rank or
// lane) is answered with a Reject, logged with its address at WARN, and closed; the
// transport carries on. With a job key, both ends then prove they hold it
// (HMAC-SHA256 challenge-response, auth/auth.hpp) before the connection becomes a link;
// a peer that fails is rejected the same way.
//
// The transport knows nothing of collectives: it hands out Links (transport/link.hpp),
// each owning its socket, and the executor (or the p2p engine) moves the bytes.
//
// Threading: two threads may connect at once (the collectives' caller on lane
// Collective, the p2p engine on lane P2P). One mutex guards the connections in their
// handshake, the links, the refusals and the address cache; it is never held across a
// wait (poll, the store, a dial), and either thread accepts and keeps connections for
// either lane, waking the other when its set of connections changed. Links are never
// removed before the transport is destroyed, so a Link& stays valid. stats() and
// resetStats() are safe from any thread.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "auth/auth.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"
#include "tccl/stats.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "transport/link.hpp"
#include "transport/wire.hpp"

namespace tccl {

struct TransportConfig {
  int rank = 0;
  int worldSize = 1;
  uint64_t jobId = 0;
  uint64_t commId = 0;
  std::string listenAddress = "127.0.0.1";
  int socketBufferBytes = 0;  // SO_SNDBUF and SO_RCVBUF of every link; 0: autotuning
  // SO_SNDBUF of the collectives' links whose two ends are on this host (net::sameHost),
  // where socketBufferBytes is 0; 0: autotuning (config::socketBufferBytes says why).
  int sameHostSendBuffer = 0;
  // SO_SNDBUF and SO_RCVBUF of the p2p lane's links whose two ends are on this host, where
  // socketBufferBytes is 0; 0: autotuning (bootstrap::configureBuffers leaves it 0 where
  // the kernel's caps are lower: net::bufferCapsAllow).
  int sameHostP2PBuffer = 0;
  // How long a p2p-lane dial may wait for the peer's address and its answer.
  std::chrono::milliseconds dialTimeout{60000};
  // The job's key (docs/security.md); null: connections are not authenticated. With
  // authKeyFromEnv, the transport reads it from TCCL_AUTH_KEY / TCCL_AUTH_KEY_FILE at
  // construction instead.
  auth::KeyPtr authKey;
  bool authKeyFromEnv = true;
  // The listener under abuse (docs/security.md): at most maxPending incoming connections
  // in their handshake at once (past it the oldest is closed), each closed unless it
  // finishes within handshakeTimeout. Before it authenticates, a connection makes this
  // rank read at most two 112-byte handshake messages (plus at most 64 KiB drained
  // after a Reject), whatever it sends.
  int maxPending = 128;
  std::chrono::milliseconds handshakeTimeout{30000};
  // Data sockets: keepalive + TCP_USER_TIMEOUT (net::setDeadPeerTimeout); 0: off.
  std::chrono::milliseconds deadPeerTimeout{60000};
  // TCCL_NSOCKS (docs/nsocks.md): TCP connections per peer on the collectives' lane,
  // 1..wire::kMaxStripes; with more than one, the lane's link is a StripedLink over them
  // that stripes the messages it sends from stripeMinBytes up (UINT64_MAX: never; the
  // cost model's choice, algo::chooseStriping). Every rank must have the same nsocks.
  int nsocks = 1;
  uint64_t stripeMinBytes = UINT64_MAX;
};

class Transport : public LinkProvider {
 public:
  // Opens the listener and publishes its address in `store` (already namespaced).
  Transport(TransportConfig config, std::shared_ptr<Store> store);
  // A child attached to `hub` (a transport made by the constructor above): publishes
  // the hub's address and registers with it, so that the hub routes the child's
  // incoming connections to it. config.jobId must be the hub's; config.commId unique.
  Transport(TransportConfig config, std::shared_ptr<Store> store, std::shared_ptr<Transport> hub);
  ~Transport() override;

  // Makes sure a connection on `lane` to every peer in `peers` exists, connecting to
  // higher ranks and accepting from lower ones, all before `deadline`. Connections
  // accepted along the way from other valid peers (either lane) are kept for later.
  void connect(const std::vector<int>& peers, Deadline deadline, Lane lane = Lane::Collective);
  // An abort from another thread sets *flag and makes wakeFd readable: connect() then
  // stops waiting and throws Aborted. Set before any thread connects.
  void setInterrupt(int wakeFd, const std::atomic<bool>* flag) {
    wakeFd_ = wakeFd;
    abortFlag_ = flag;
  }

  // The link to `peer` on `lane`; throws InvalidArgumentError when there is none.
  Link& link(int peer, Lane lane);
  Link& link(int peer) override { return link(peer, Lane::Collective); }
  bool connected(int peer, Lane lane = Lane::Collective) const;
  // The address peer `peer` published (for error messages before a connection), cached.
  // A thread with a store connection of its own (the heartbeat's) passes it as `via`
  // so as not to queue behind the transport's.
  std::string publishedAddress(int peer, Store* via = nullptr) const;
  std::string listenAddress() const { return listenAddr_; }

  // Per peer, the sum over its links of both lanes (handshakes included).
  CommStats stats() const;
  // The same into `out` (cleared; its capacity kept), in peer order: what a call's
  // before-and-after snapshot takes without building a map.
  void countersByPeer(std::vector<std::pair<int, PeerCounters>>& out) const;
  void resetStats();
  // Ends every link of `lane` (peers then see end-of-file after the data already sent)
  // and drops that lane's connections still in their handshake.
  void closeAll(Lane lane = Lane::Collective);
  // Sends `abortHeader` on every open link of `lane` not in the middle of a message
  // (best effort, never blocks), then ends them all like closeAll(). Only the lane's
  // owning thread may call it (or any thread while the owner is not using its links).
  void abortAll(const wire::MessageHeader& abortHeader, Lane lane = Lane::Collective);
  // The peers with an open link on `lane`.
  std::vector<int> connectedPeers(Lane lane) const;
  // Changes whenever connectedPeers(Lane::Collective) may have changed (a link made or
  // the lane closed): a caller that saw the same value may keep its last answer.
  uint64_t collectiveLinksVersion() const {
    return collectiveVersion_.load(std::memory_order_acquire);
  }

  // ---- the p2p lane (docs/protocol.md, "Connections") ----
  // The p2p link to `peer` once it is up, else nullptr, having started a dial unless one
  // (ours or the peer's) is under way. The p2p lane is dialled by whichever rank needs
  // it first, so a rank may dial a lower one; when both dial at once, the connection the
  // lower rank dialled is kept and the other refused (Duplicate). Never blocks. Throws
  // the error that ended the last attempt, once (a later call dials again).
  Link* tryLink(int peer);
  // Every open link of `lane`.
  std::vector<Link*> links(Lane lane) const;
  // A descriptor of the caller's own (an eventfd the transport owns) that turns readable
  // once a p2p link came up or a p2p dial failed; its reader drains it. One per reader,
  // so that one reader draining it cannot hide the event from another.
  int subscribeLinkEvents();
  void unsubscribeLinkEvents(int fd);
  // Counts the p2p links that came up and the dials that failed: a reader that saw the
  // same value last time need not list the links again.
  uint64_t linkEventCount() const { return linkEvents_.load(std::memory_order_acquire); }
  std::vector<int> connectedPeers() const override { return connectedPeers(Lane::Collective); }
  // Children registered with this hub now (tests, the measurement of docs/PERFORMANCE.md).
  size_t attachedChildren() const;

 private:
  // A connection in its handshake (docs/protocol.md): incoming (we accepted it) or
  // outgoing (we dialled it and sent our Hello).
  enum class Stage {
    AwaitHello,    // incoming: the dialler's Hello
    AwaitProof,    // incoming: we sent a Challenge; the dialler's Proof
    AwaitReply,    // outgoing: the acceptor's Accept, Reject or Challenge
    AwaitVerdict,  // outgoing: we sent our Proof; the acceptor's Accept or Reject
  };
  struct Pending {
    net::Fd fd;
    std::string address;
    bool outgoing = false;
    int peer = -1;  // outgoing: the rank we dialled; incoming: the rank its Hello named
    Lane lane = Lane::Collective;  // outgoing: the lane dialled; incoming: its Hello's
    int stripe = 0;                // which of the lane's nsocks connections this is
    uint32_t laneField = 0;        // the Hello's lane field (wire::laneField), repeated
    Stage stage = Stage::AwaitHello;
    uint8_t buf[wire::kHelloSize] = {};
    size_t got = 0;
    Deadline::Clock::time_point since;
    auth::Transcript transcript;  // with a key: what both MACs cover
    uint64_t bytesSent = 0;       // handshake bytes, counted into the link's wire bytes
    uint64_t bytesRecv = 0;
    // Read at least once by a service round: a peer's Hello, sent as it connects, has had
    // its chance to arrive, so only such entries are ever closed to make room.
    bool seen = false;
  };
  // Reads what is there; returns true when the pending entry is finished (either a
  // link was made or the connection was dropped). Throws for a refused outgoing
  // connection. mu_ is held by the callers of service() and of everything below.
  bool service(Pending& p);
  // Handles one complete handshake message in p.buf; returns true when finished.
  bool onIncoming(Pending& p, const wire::Hello& h);
  bool onOutgoing(Pending& p, const wire::Hello& h);
  // Sends a handshake message on a pending connection (112 bytes into a fresh socket's
  // empty buffer: does not block). False if the peer is gone.
  bool sendHello(Pending& p, const wire::Hello& h);
  // Replies Reject(reason) to an incoming connection, logs it at WARN, drops it.
  bool rejectIncoming(Pending& p, wire::RejectReason reason, const std::string& detail = "");
  // Tells the acceptor why we refuse it (best effort) and throws a HandshakeError.
  [[noreturn]] void refuseOutgoing(Pending& p, wire::RejectReason tell, const std::string& why);
  wire::Hello myHello(wire::HelloKind kind, int target, uint32_t laneField) const;
  // Connections a lane has per peer: nsocks on the collectives', one on the p2p lane.
  int socketsPerPeer(Lane lane) const { return lane == Lane::Collective ? cfg_.nsocks : 1; }
  // The link, or this one of its connections, exists already (a Duplicate).
  bool haveConnection(int peer, Lane lane, int stripe) const;
  // Remembers why a connection claiming to be `claimedRank` was refused, for the error
  // if that rank then never connects (the refusal was only logged at the time).
  void noteRefusal(int claimedRank, const std::string& address, std::string_view why);
  void addLink(Pending& p);
  void closeAllLocked(Lane lane);
  bool hasLink(int peer, Lane lane) const { return links_.count({peer, lane}) != 0; }
  // Makes every other thread waiting in connect() look again (a link was made, or a
  // connection accepted that it should watch).
  void wakeOthers(int selfFd);
  // The background service thread: accepts connections and runs every incoming
  // handshake and the p2p lane's outgoing ones, so that the listener is served whether
  // or not a thread is inside connect() (a stranger is answered at once; a peer that
  // dials for point to point is accepted while this rank computes).
  void serviceLoop();
  // One round of it, with mu_ held: returns the descriptors to wait on.
  void serviceRound(std::vector<pollfd>& fds);
  void acceptAll();
  // serviceRound's work on this transport's own pending connections (a hub's service
  // thread runs it for each child too, with the child's mu_ held): appends their fds.
  void servicePending(std::vector<pollfd>& fds);
  // Hub: hands the connection whose Hello `h` was just read to the registered child with
  // that communicator id (p is moved from); false if there is none. Takes childMu_.
  bool routeToChild(Pending& p, const wire::Hello& h);
  // Child: takes over an incoming connection whose Hello `h` the hub read (takes mu_).
  void adoptIncoming(std::unique_ptr<Pending> p, const wire::Hello& h);
  // Wakes the service thread that serves this transport (the hub's for a child).
  void wakeService();
  // ---- the listener under abuse (transport_service.cpp) ----
  // Closes the oldest incoming connection still in its handshake that a service round has
  // read at least once (preferring one without a valid Hello); false if there is none.
  bool evictOldestIncoming();
  std::unique_ptr<Pending> makeIncoming(net::Fd fd, const net::SockAddr& from);
  // True (and the entry is to be dropped) when p is an incoming connection past its
  // handshake deadline.
  bool expired(const Pending& p, Deadline::Clock::time_point now);
  // accept(2) failed with EMFILE / ENFILE / ENOBUFS / ENOMEM: stop polling the listener
  // for a while (the connection stays queued, so it would be readable at once again).
  void acceptExhausted(int err);
  // The listener's descriptor for poll(): -1 (ignored) while accepting is paused.
  int listenerPollFd() const;
  // A poll timeout (ms) that also wakes when the pause ends.
  int capPollTimeout(int timeoutMs) const;
  // One WARN line about a stranger, for the first kStrangerLines of them; then one line
  // saying the rest are only counted (the count is logged when the transport closes).
  void warnStranger(const std::string& line);
  // A p2p dial, on a thread of its own: the peer's address, the TCP connect and the
  // Hello, then the service thread takes it over.
  void dialP2P(int peer);
  // Dials `peer` for `lane` and sends the Hello (blocking, without mu_): the pending
  // entry whose reply the service thread or connect() then reads.
  std::unique_ptr<Pending> dial(int peer, Lane lane, Deadline deadline, int stripe = 0);
  // Waits (without mu_) until `peer` published its address: true once it has, false if
  // stop() said so first; throws a Timeout naming the missing key at the deadline.
  bool awaitAddress(int peer, Deadline deadline, const std::function<bool()>& stop);
  // connect()'s error when `missing` never connected by its deadline (mu_ held).
  ErrorInfo connectTimeout(const std::vector<int>& missing, Lane lane,
                           Deadline::Clock::time_point start) const;
  bool p2pUnderWay(int peer) const;  // mu_ held
  // An incoming p2p dial from `peer` that loses to this rank's own dial (mu_ held).
  bool lostCrossedDial(int peer, Lane lane) const;
  void signalLinkEvent();

  TransportConfig cfg_;
  std::shared_ptr<Store> store_;
  int wakeFd_ = -1;
  const std::atomic<bool>* abortFlag_ = nullptr;
  [[noreturn]] void throwInterrupted(int peer) const;
  net::Fd listener_;
  std::string listenAddr_;
  mutable std::mutex mu_;
  std::map<std::pair<int, Lane>, std::unique_ptr<Link>> links_;
  // Collectives' links with nsocks > 1 whose connections are not all made yet: per peer,
  // the connections by stripe (null: not yet) and their handshake bytes.
  struct Assembly {
    std::vector<std::unique_ptr<Link>> stripes;
    PeerCounters handshake;
    int have = 0;
  };
  std::map<int, Assembly> assembling_;
  // Peers refused for another TCCL_NSOCKS: connect() fails at once for them (the
  // refusal is final), with this text.
  std::map<int, std::string> nsocksRefused_;
  std::vector<std::unique_ptr<Pending>> pending_;
  mutable std::map<int, std::string> published_;
  std::map<int, std::string> refused_;  // claimed rank -> "address: reason" of the last refusal
  std::set<int> waiters_;               // the eventfds of the threads waiting in connect()
  // The service thread and what it shares (under mu_ but for the descriptors).
  std::thread service_;
  net::Fd serviceWake_;
  std::mutex subscribersMu_;  // below mu_: signalLinkEvent runs under mu_
  std::vector<net::Fd> linkSubscribers_;
  std::atomic<uint64_t> linkEvents_{1};
  std::atomic<uint64_t> collectiveVersion_{1};  // collectiveLinksVersion()
  std::atomic<bool> stopping_{false};
  std::set<int> dialling_;               // p2p dials before their pending entry exists
  std::map<int, ErrorInfo> dialErrors_;  // p2p dials that failed, for tryLink
  std::vector<std::thread> dialers_;
  // A child: the hub it is attached to (null for a hub). A hub: its children.
  std::shared_ptr<Transport> hub_;
  mutable std::mutex childMu_;
  std::vector<Transport*> children_;
  // The listener under abuse (mu_).
  Deadline::Clock::time_point acceptPausedUntil_{};
  std::chrono::milliseconds acceptBackoff_{0};
  bool warnedCap_ = false;
  bool warnedFdLimit_ = false;
  uint64_t strangerEvents_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace tccl
