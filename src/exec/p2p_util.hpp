// Small helpers the p2p engine's files share (exec/p2p.cpp, exec/p2p_match.cpp).
#pragma once

#include <algorithm>
#include <deque>
#include <string>

#include "exec/p2p.hpp"

namespace tccl::p2p_util {

inline std::string tagText(int tag) {
  return tag == kAnyTag ? "any tag" : "tag " + std::to_string(tag);
}
inline std::string sourceText(int peer) {
  return peer == kAnySource ? "any rank" : "rank " + std::to_string(peer);
}

inline bool accepts(const P2POp& recv, int peer, int tag) {
  return (recv.peer == kAnySource || recv.peer == peer) && (recv.tag == kAnyTag || recv.tag == tag);
}

template <typename T>
bool eraseFrom(std::deque<T>& q, const T& v) {
  auto it = std::find(q.begin(), q.end(), v);
  if (it == q.end()) return false;
  q.erase(it);
  return true;
}

inline void addTraffic(P2POp& op, int peer, bool sent, size_t payload, size_t wireBytes) {
  PeerCounters& c = op.result_.stats.traffic.perPeer[peer];
  if (sent) {
    c.payloadSent += payload;
    c.wireSent += wireBytes;
    c.messagesSent += 1;
  } else {
    c.payloadRecv += payload;
    c.wireRecv += wireBytes;
    c.messagesRecv += 1;
  }
}

}  // namespace tccl::p2p_util
