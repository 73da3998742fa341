// The p2p engine's receive side: what arrives on a link, and matching it to posted
// receives (exec/p2p.hpp has the rules; docs/protocol.md the messages).
#include <algorithm>
#include <cstring>

#include "exec/p2p.hpp"
#include "exec/p2p_util.hpp"

namespace tccl {

using wire::MsgKind;
using namespace p2p_util;

bool P2PEngine::pumpRx(LinkState& ls, std::vector<P2PHandle>& completed) {
  bool progress = false;
  while (!ls.closed) {
    // The last read emptied the socket: wait for poll(2) to say more came (a read now
    // would most likely find nothing), unless it already did.
    if (ls.rx.drained() && !ls.rxStirred) return progress;
    ls.rxStirred = false;
    LinkIo r;
    const bool inHeader = !ls.rx.headerReady();
    r = inHeader ? ls.rx.pumpHeader(*ls.link) : ls.rx.pumpPayload(*ls.link);
    if (r.status == LinkStatus::Blocked) return progress;
    if (r.status == LinkStatus::Closed || r.status == LinkStatus::Error) {
      closeLink(ls, ErrorKind::PeerClosed,
                r.status == LinkStatus::Closed ? "connection closed by the peer"
                                               : "receive failed: " + ls.link->errorText(),
                completed);
      return true;
    }
    progress = true;
    if (!ls.rx.headerReady()) continue;
    if (inHeader) {
      if (ls.rx.decodeStatus() != wire::DecodeStatus::Ok) {
        closeLink(ls, ErrorKind::Protocol,
                  "undecodable message header from the peer: " +
                      std::string(wire::toString(ls.rx.decodeStatus())),
                  completed);
        return true;
      }
      onHeader(ls, completed);
      if (ls.closed) return true;
    }
    const wire::MessageHeader& h = ls.rx.header();
    const size_t need = wire::carriesPayload(h.kind) ? h.length : 0;
    if (ls.rx.payloadGot() >= need) {
      onMessage(ls, completed);
      ls.rx.reset();
      ls.rxOp.reset();
      ls.rxUnexpected.reset();
    }
  }
  return progress;
}

// A header is in: decide where its payload goes (or handle a header-only message).
void P2PEngine::onHeader(LinkState& ls, std::vector<P2PHandle>& completed) {
  const wire::MessageHeader h = ls.rx.header();
  switch (h.kind) {
    case MsgKind::Eager:
      if (h.length > cfg_.poolBytes) {
        closeLink(ls, ErrorKind::Protocol,
                  "an eager message of " + std::to_string(h.length) +
                      " bytes exceeds the pool (TCCL_P2P_POOL_BYTES differs between ranks?)",
                  completed);
        return;
      }
      [[fallthrough]];
    case MsgKind::Rts:
      matchEnvelope(ls, h, completed);
      return;
    case MsgKind::Chunk: {
      auto it = streamingRecvs_.find(h.fingerprint);
      if (it == streamingRecvs_.end()) {
        ls.discard.resize(h.length);  // a receive that gave up: drop its chunks
        ls.rx.setTarget(ls.discard.data());
        return;
      }
      P2POp& op = *it->second;
      if (h.length > op.expect - op.moved) {
        closeLink(ls, ErrorKind::Protocol, "a chunk overruns its message", completed);
        return;
      }
      ls.rxOp = it->second;
      ls.rx.setTarget(op.buf + op.moved);
      return;
    }
    case MsgKind::Cts: {
      auto it = awaitingCts_.find(h.step);
      if (it == awaitingCts_.end()) return;  // cancelled meanwhile
      P2PHandle op = it->second;
      awaitingCts_.erase(it);
      addTraffic(*op, ls.peer, false, 0, wire::kHeaderSize);
      if (h.fingerprint == 0) {
        fail(op,
             errorFor(*op, ErrorKind::InvalidArgument,
                      "the peer's matching receive is smaller than this " +
                          std::to_string(op->bytes) + "-byte message (truncation)"),
             completed);
        return;
      }
      op->remoteId = h.fingerprint;
      op->state = P2POp::State::Streaming;
      op->moved = 0;
      if (op->bytes == 0) {
        finish(op, completed);
      } else {
        ls.streams.push_back(op);
      }
      return;
    }
    case MsgKind::Credit:
      ls.credit += h.length;
      return;
    case MsgKind::Cancel: {
      for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
        if ((*it)->peer == ls.peer && (*it)->rendezvous && (*it)->sendId == h.step) {
          unexpected_.erase(it);
          return;
        }
      }
      for (auto it = streamingRecvs_.begin(); it != streamingRecvs_.end(); ++it) {
        P2PHandle op = it->second;
        if (op->remoteId == h.step && op->result_.source == ls.peer) {
          // The sender gave up before our Cts reached it, so nothing of the message was
          // sent: the receive never really matched. It goes back to being posted (it was
          // posted before any receive still waiting) and may match a later message.
          streamingRecvs_.erase(it);
          op->state = P2POp::State::Queued;
          op->remoteId = 0;
          op->expect = 0;
          op->result_.source = -1;
          op->result_.tag = -1;
          if (!matchUnexpected(op, completed)) recvs_.push_front(op);
          return;
        }
      }
      return;
    }
    case MsgKind::Abort: {
      const int culprit = h.fingerprint < static_cast<uint32_t>(cfg_.worldSize)
                              ? static_cast<int>(h.fingerprint)
                              : -1;
      closeLink(ls, ErrorKind::Aborted,
                "rank " + std::to_string(ls.peer) + " aborted the communicator" +
                    (culprit >= 0 ? " (culprit rank " + std::to_string(culprit) + ")" : ""),
                completed);
      return;
    }
    case MsgKind::Data:
      closeLink(ls, ErrorKind::Protocol,
                "a collective's message arrived on the point-to-point connection", completed);
      return;
  }
}

void P2PEngine::matchEnvelope(LinkState& ls, const wire::MessageHeader& h,
                              std::vector<P2PHandle>& completed) {
  const int tag = static_cast<int>(h.seq);
  const bool rendezvous = h.kind == MsgKind::Rts;
  P2PHandle recv;
  for (const P2PHandle& r : recvs_) {
    if (accepts(*r, ls.peer, tag)) {
      recv = r;
      break;
    }
  }
  if (!recv) {
    auto u = std::make_shared<Unexpected>();
    u->peer = ls.peer;
    u->tag = tag;
    u->sendId = h.step;
    u->bytes = h.length;
    u->rendezvous = rendezvous;
    u->complete = rendezvous || h.length == 0;
    if (!rendezvous) {
      u->data.resize(h.length);
      unexpectedBytes_ += h.length;
      unexpectedPeak_ = std::max(unexpectedPeak_, unexpectedBytes_);
      ls.rxUnexpected = u;
      ls.rx.setTarget(u->data.data());
    }
    unexpected_.push_back(u);
    return;
  }
  eraseFrom(recvs_, recv);
  recv->result_.source = ls.peer;
  recv->result_.tag = tag;
  if (h.length > recv->bytes) {
    const std::string why = "a " + std::to_string(h.length) + "-byte message from rank " +
                            std::to_string(ls.peer) + " with tag " + std::to_string(tag) +
                            " does not fit this " + std::to_string(recv->bytes) +
                            "-byte receive (truncation)";
    fail(recv, errorFor(*recv, ErrorKind::InvalidArgument, why), completed);
    if (rendezvous) {
      Tx t;
      t.header.kind = MsgKind::Cts;
      t.header.fingerprint = 0;  // refused
      t.header.step = h.step;
      ls.control.push_back(t);
    } else {
      ls.discard.resize(h.length);
      ls.rx.setTarget(ls.discard.data());
      giveCredit(ls, h.length);
    }
    return;
  }
  if (rendezvous) {
    startStreaming(ls, recv, ls.peer, h.step, h.length);
    if (h.length == 0) finish(recv, completed);
    return;
  }
  recv->state = P2POp::State::Landing;
  recv->expect = h.length;
  ls.rxOp = recv;
  ls.rx.setTarget(recv->buf);
}

void P2PEngine::startStreaming(LinkState& ls, const P2PHandle& recv, int peer, uint32_t sendId,
                               size_t bytes) {
  recv->state = P2POp::State::Streaming;
  recv->expect = bytes;
  recv->moved = 0;
  recv->remoteId = sendId;
  recv->result_.source = peer;
  streamingRecvs_[recv->id] = recv;
  Tx t;
  t.header.kind = MsgKind::Cts;
  t.header.fingerprint = recv->id;
  t.header.step = sendId;
  t.op = recv;
  ls.control.push_back(t);
}

// A whole message is in (or a header-only one was handled).
void P2PEngine::onMessage(LinkState& ls, std::vector<P2PHandle>& completed) {
  const wire::MessageHeader& h = ls.rx.header();
  if (h.kind == MsgKind::Eager) {
    if (ls.rxUnexpected) {
      std::shared_ptr<Unexpected> u = ls.rxUnexpected;
      u->complete = true;
      if (u->dropped) {
        giveCredit(ls, u->data.size());
        return;
      }
      if (P2PHandle r = u->boundRecv) {
        if (!u->data.empty()) std::memcpy(r->buf, u->data.data(), u->data.size());
        r->result_.bytes = u->data.size();
        addTraffic(*r, ls.peer, false, u->data.size(), wire::kHeaderSize + u->data.size());
        eraseFrom(unexpected_, u);
        unexpectedBytes_ -= u->data.size();
        giveCredit(ls, u->data.size());
        finish(r, completed);
      }
      return;
    }
    if (ls.rxOp && ls.rxOp->state == P2POp::State::Landing) {
      P2PHandle r = ls.rxOp;
      r->result_.bytes = h.length;
      addTraffic(*r, ls.peer, false, h.length, wire::kHeaderSize + h.length);
      giveCredit(ls, h.length);
      finish(r, completed);
      return;
    }
    giveCredit(ls, h.length);  // discarded (a receive that failed meanwhile)
    return;
  }
  if (h.kind == MsgKind::Chunk && ls.rxOp && ls.rxOp->state == P2POp::State::Streaming) {
    P2PHandle r = ls.rxOp;
    r->moved += h.length;
    addTraffic(*r, ls.peer, false, h.length, wire::kHeaderSize + h.length);
    if (r->moved == r->expect) {
      streamingRecvs_.erase(r->id);
      r->result_.bytes = r->expect;
      finish(r, completed);
    }
  }
}

bool P2PEngine::matchUnexpected(const P2PHandle& recv, std::vector<P2PHandle>& completed) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    std::shared_ptr<Unexpected> u = *it;
    if (u->boundRecv || !accepts(*recv, u->peer, u->tag)) continue;
    recv->result_.source = u->peer;
    recv->result_.tag = u->tag;
    LinkState* ls = stateFor(u->peer);
    if (u->bytes > recv->bytes) {
      unexpected_.erase(it);
      if (!u->rendezvous) unexpectedBytes_ -= u->data.size();
      fail(recv,
           errorFor(*recv, ErrorKind::InvalidArgument,
                    "a " + std::to_string(u->bytes) + "-byte message from rank " +
                        std::to_string(u->peer) + " with tag " + std::to_string(u->tag) +
                        " does not fit this " + std::to_string(recv->bytes) +
                        "-byte receive (truncation)"),
           completed);
      if (ls && u->rendezvous) {
        Tx t;
        t.header.kind = MsgKind::Cts;
        t.header.step = u->sendId;
        ls->control.push_back(t);
      } else if (ls && u->complete) {
        giveCredit(*ls, u->bytes);
      } else {
        u->dropped = true;  // its credit goes back once the payload is in
      }
      return true;
    }
    if (u->rendezvous) {
      unexpected_.erase(it);
      if (ls) startStreaming(*ls, recv, u->peer, u->sendId, u->bytes);
      if (u->bytes == 0) finish(recv, completed);
      return true;
    }
    if (!u->complete) {
      u->boundRecv = recv;
      recv->state = P2POp::State::Landing;
      return true;
    }
    if (!u->data.empty()) std::memcpy(recv->buf, u->data.data(), u->data.size());
    recv->result_.bytes = u->data.size();
    addTraffic(*recv, u->peer, false, u->data.size(), wire::kHeaderSize + u->data.size());
    unexpected_.erase(it);
    unexpectedBytes_ -= u->data.size();
    if (ls) giveCredit(*ls, u->bytes);
    finish(recv, completed);
    return true;
  }
  return false;
}

void P2PEngine::giveCredit(LinkState& ls, size_t bytes) {
  ls.owed += bytes;
  if (ls.owed == 0 || ls.owed < std::max<size_t>(cfg_.poolBytes / 4, 1)) return;
  Tx t;
  t.header.kind = MsgKind::Credit;
  t.header.length = ls.owed;
  ls.control.push_back(t);
  ls.owed = 0;
}

}  // namespace tccl
