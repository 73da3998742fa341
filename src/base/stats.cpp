#include "tccl/stats.hpp"

namespace tccl {

PeerCounters& PeerCounters::operator+=(const PeerCounters& o) {
  payloadSent += o.payloadSent;
  payloadRecv += o.payloadRecv;
  wireSent += o.wireSent;
  wireRecv += o.wireRecv;
  messagesSent += o.messagesSent;
  messagesRecv += o.messagesRecv;
  return *this;
}

PeerCounters PeerCounters::operator-(const PeerCounters& o) const {
  PeerCounters r;
  r.payloadSent = payloadSent - o.payloadSent;
  r.payloadRecv = payloadRecv - o.payloadRecv;
  r.wireSent = wireSent - o.wireSent;
  r.wireRecv = wireRecv - o.wireRecv;
  r.messagesSent = messagesSent - o.messagesSent;
  r.messagesRecv = messagesRecv - o.messagesRecv;
  return r;
}

PeerCounters CommStats::total() const {
  PeerCounters t;
  for (const auto& [peer, c] : perPeer) t += c;
  return t;
}

}  // namespace tccl
