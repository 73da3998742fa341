// The transport: one listening socket per communicator, and at most one TCP
// connection per peer, opened lazily when an algorithm first needs that peer.
//
// Connection rule: the lower rank connects, the higher rank accepts. The listener's
// address is published in the store under "addr/<rank>". Every connection begins with
// the Hello exchange of wire.hpp; a stranger (bad magic, other job, other
// communicator, wrong world size or rank) is answered with a Reject, logged with its
// address at WARN, and closed; the transport carries on. With a job key, both ends then
// prove they hold it (HMAC-SHA256 challenge-response, auth/auth.hpp) before the
// connection becomes a channel; a peer that fails is rejected the same way.
//
// The transport knows nothing of collectives: it hands out Channels (a connected
// nonblocking socket plus its byte counters) and the executor moves the bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "auth/auth.hpp"
#include "net/socket.hpp"
#include "tccl/stats.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "transport/wire.hpp"

namespace tccl {

struct Channel {
  int peer = -1;
  std::string address;  // peer's ip:port as seen on this socket
  net::Fd fd;
  PeerCounters counters;
  // A message is half sent: nothing else may be written until it is finished (an
  // abort then only closes the connection).
  bool txPartial = false;
};

struct TransportConfig {
  int rank = 0;
  int worldSize = 1;
  uint64_t jobId = 0;
  uint64_t commId = 0;
  std::string listenAddress = "127.0.0.1";
  int socketBufferBytes = 0;  // 0: kernel autotuning
  // The job's key (docs/security.md); null: connections are not authenticated. With
  // authKeyFromEnv, the transport reads it from TCCL_AUTH_KEY / TCCL_AUTH_KEY_FILE at
  // construction instead.
  auth::KeyPtr authKey;
  bool authKeyFromEnv = true;
};

class Transport {
 public:
  // Opens the listener and publishes its address in `store` (already namespaced).
  Transport(TransportConfig config, std::shared_ptr<Store> store);
  ~Transport();

  // Makes sure a connection to every peer in `peers` exists, connecting to higher
  // ranks and accepting from lower ones, all before `deadline`. Connections accepted
  // along the way from other valid peers are kept for later.
  void connect(const std::vector<int>& peers, Deadline deadline);
  // An abort from another thread sets *flag and makes wakeFd readable: connect() then
  // stops waiting and throws Aborted.
  void setInterrupt(int wakeFd, const std::atomic<bool>* flag) {
    wakeFd_ = wakeFd;
    abortFlag_ = flag;
  }

  Channel& channel(int peer);
  bool connected(int peer) const;
  // The address peer `peer` published (for error messages before a connection).
  std::string publishedAddress(int peer) const;
  std::string listenAddress() const { return listenAddr_; }

  CommStats stats() const;
  void resetStats();
  // Ends every connection (peers then see end-of-file after the data already sent).
  void closeAll();
  // Sends `abortHeader` on every connection not in the middle of a message (best
  // effort, never blocks), then ends them all like closeAll().
  void abortAll(const wire::MessageHeader& abortHeader);
  // The peers with an open connection.
  std::vector<int> connectedPeers() const;

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
    Stage stage = Stage::AwaitHello;
    uint8_t buf[wire::kHelloSize] = {};
    size_t got = 0;
    Deadline::Clock::time_point since;
    auth::Transcript transcript;  // with a key: what both MACs cover
    uint64_t bytesSent = 0;       // handshake bytes, counted into the channel's wire bytes
    uint64_t bytesRecv = 0;
  };
  // Reads what is there; returns true when the pending entry is finished (either a
  // channel was made or the connection was dropped). Throws for a refused outgoing
  // connection.
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
  wire::Hello myHello(wire::HelloKind kind, int target) const;
  // Remembers why a connection claiming to be `claimedRank` was refused, for the error
  // if that rank then never connects (the refusal was only logged at the time).
  void noteRefusal(int claimedRank, const std::string& address, std::string_view why);
  void addChannel(Pending& p);

  TransportConfig cfg_;
  std::shared_ptr<Store> store_;
  int wakeFd_ = -1;
  const std::atomic<bool>* abortFlag_ = nullptr;
  [[noreturn]] void throwInterrupted(int peer) const;
  net::Fd listener_;
  std::string listenAddr_;
  std::map<int, std::unique_ptr<Channel>> channels_;
  std::vector<std::unique_ptr<Pending>> pending_;
  mutable std::map<int, std::string> published_;
  std::map<int, std::string> refused_;  // claimed rank -> "address: reason" of the last refusal
};

}  // namespace tccl
