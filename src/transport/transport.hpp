// The transport: one listening socket per communicator, and at most one TCP
// connection per peer, opened lazily when an algorithm first needs that peer.
//
// Connection rule: the lower rank connects, the higher rank accepts. The listener's
// address is published in the store under "addr/<rank>". Every connection begins with
// the Hello exchange of wire.hpp; a stranger (bad magic, other job, other
// communicator, wrong world size or rank) is answered with a Reject, logged with its
// address at WARN, and closed; the transport carries on.
//
// The transport knows nothing of collectives: it hands out Channels (a connected
// nonblocking socket plus its byte counters) and the executor moves the bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tccl/stats.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "transport/socket.hpp"
#include "transport/wire.hpp"

namespace tccl {

struct Channel {
  int peer = -1;
  std::string address;  // peer's ip:port as seen on this socket
  net::Fd fd;
  PeerCounters counters;
};

struct TransportConfig {
  int rank = 0;
  int worldSize = 1;
  uint64_t jobId = 0;
  uint64_t commId = 0;
  std::string listenAddress = "127.0.0.1";
  int socketBufferBytes = 0;  // 0: kernel autotuning
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

  Channel& channel(int peer);
  bool connected(int peer) const;
  // The address peer `peer` published (for error messages before a connection).
  std::string publishedAddress(int peer) const;
  std::string listenAddress() const { return listenAddr_; }

  CommStats stats() const;
  void resetStats();
  // Ends every connection (peers then see end-of-file after the data already sent).
  void closeAll();

 private:
  // A connection in its handshake: incoming (we accepted it, waiting for its Hello)
  // or outgoing (we sent our Hello, waiting for the Accept).
  struct Pending {
    net::Fd fd;
    std::string address;
    bool outgoing = false;
    int peer = -1;  // outgoing: the rank we dialled
    uint8_t buf[wire::kHelloSize] = {};
    size_t got = 0;
    Deadline::Clock::time_point since;
  };
  // Reads what is there; returns true when the pending entry is finished (either a
  // channel was made or the connection was dropped). Throws for a refused outgoing
  // connection.
  bool service(Pending& p);
  void finishIncoming(Pending& p);
  void finishOutgoing(Pending& p);
  void addChannel(int peer, net::Fd fd, const std::string& address);

  TransportConfig cfg_;
  std::shared_ptr<Store> store_;
  net::Fd listener_;
  std::string listenAddr_;
  std::map<int, std::unique_ptr<Channel>> channels_;
  std::vector<std::unique_ptr<Pending>> pending_;
  mutable std::map<int, std::string> published_;
};

}  // namespace tccl
