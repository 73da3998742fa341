#include "exec/executor.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>

#include "core/log.hpp"
#include "reduce/reduce.hpp"
#include "tccl/error.hpp"
#include "transport/wire.hpp"

namespace tccl {
namespace {

using algo::BufferId;
using algo::Op;
using algo::OpType;
using algo::RecvAction;

struct ChanState {
  Channel* ch = nullptr;
  std::vector<int32_t> sends;
  std::vector<int32_t> recvs;
  size_t sendHead = 0;
  size_t recvHead = 0;
  // The message being sent: header then payload; sendDone counts both.
  uint8_t sendHdr[wire::kHeaderSize] = {};
  size_t sendDone = 0;
  bool sendBlocked = false;  // the socket said EAGAIN
  // The message being received.
  uint8_t recvHdr[wire::kHeaderSize] = {};
  size_t recvDone = 0;
  bool landed = false;       // payload complete, action waits for a dependency
  bool recvBlocked = false;  // the socket said EAGAIN
  uint8_t* staging = nullptr;
};

class Run {
 public:
  Run(const algo::Schedule& s, const ExecContext& c) : sched_(s), ctx_(c) {
    elem_ = dataTypeSize(c.dtype);
    done_.assign(s.ops.size(), 0);
    remaining_ = s.ops.size();
    start_ = Deadline::Clock::now();
  }

  void execute(Transport& transport, std::map<int, std::vector<uint8_t>>& staging) {
    const size_t stagingBytes = sched_.maxRecvElems() * elem_;
    std::map<int, size_t> index;
    std::set<int> reducesFrom;  // peers whose payload lands in staging
    for (const Op& op : sched_.ops) {
      if (op.type == OpType::Recv && op.action == RecvAction::Reduce) reducesFrom.insert(op.peer);
    }
    for (int peer : sched_.peers) {
      index[peer] = chans_.size();
      ChanState cs;
      cs.ch = &transport.channel(peer);
      if (reducesFrom.count(peer)) {
        std::vector<uint8_t>& buf = staging[peer];
        if (buf.size() < stagingBytes) buf.resize(stagingBytes);
        cs.staging = buf.data();
      }
      chans_.push_back(cs);
    }
    for (size_t i = 0; i < sched_.ops.size(); ++i) {
      const Op& op = sched_.ops[i];
      ChanState& cs = chans_[index[op.peer]];
      (op.type == OpType::Send ? cs.sends : cs.recvs).push_back(static_cast<int32_t>(i));
    }
    auto lastProgress = Deadline::Clock::now();
    const auto spin = std::chrono::microseconds(ctx_.spinMicros);
    while (remaining_ > 0) {
      bool progress = false;
      // Sends first, on every channel: what this rank owes its peers leaves before it
      // looks at (and perhaps fails on) what they sent.
      for (ChanState& cs : chans_) progress |= pumpSends(cs);
      for (ChanState& cs : chans_) progress |= pumpRecvs(cs);
      if (remaining_ == 0) break;
      if (progress) {
        lastProgress = Deadline::Clock::now();
        continue;
      }
      if (Deadline::Clock::now() - lastProgress < spin) {
        // Give the core away while spinning: with more ranks than cores the peer we
        // wait for may need this very core to make the progress we are waiting for.
        sched_yield();
        continue;
      }
      waitForSockets();
    }
  }

 private:
  // Where element op.range.offset of buffer b lives.
  uint8_t* ptr(BufferId b, const Op& op) const {
    switch (b) {
      case BufferId::Input:
        return const_cast<uint8_t*>(ctx_.input) + (op.range.offset - ctx_.inputOrigin) * elem_;
      case BufferId::Output:
        return ctx_.output + (op.range.offset - ctx_.outputOrigin) * elem_;
      case BufferId::Scratch:
        return ctx_.scratch + (op.range.offset - ctx_.scratchOrigin) * elem_;
    }
    return nullptr;
  }
  uint8_t* outPtr(const Op& op) const { return ptr(op.dst, op); }
  const uint8_t* bufPtr(BufferId b, const Op& op) const { return ptr(b, op); }

  void complete(int32_t idx) {
    done_[static_cast<size_t>(idx)] = 1;
    --remaining_;
  }

  bool depReady(const Op& op) const {
    return op.dependsOn < 0 || done_[static_cast<size_t>(op.dependsOn)] != 0;
  }

  bool pumpSends(ChanState& cs) {
    bool progress = false;
    cs.sendBlocked = false;
    while (cs.sendHead < cs.sends.size()) {
      const int32_t idx = cs.sends[cs.sendHead];
      const Op& op = sched_.ops[static_cast<size_t>(idx)];
      if (!depReady(op)) break;
      const size_t len = op.range.count * elem_;
      if (cs.sendDone == 0) {
        wire::MessageHeader h;
        h.kind = wire::MsgKind::Data;
        h.seq = ctx_.seq;
        h.fingerprint = ctx_.fingerprint;
        h.step = op.step;
        h.length = len;
        wire::encodeHeader(h, cs.sendHdr);
      }
      iovec iov[2];
      int iovcnt = 0;
      const uint8_t* payload = bufPtr(op.buffer, op);
      if (cs.sendDone < wire::kHeaderSize) {
        iov[iovcnt++] = {cs.sendHdr + cs.sendDone, wire::kHeaderSize - cs.sendDone};
        if (len > 0) iov[iovcnt++] = {const_cast<uint8_t*>(payload), len};
      } else {
        size_t off = cs.sendDone - wire::kHeaderSize;
        iov[iovcnt++] = {const_cast<uint8_t*>(payload) + off, len - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(iovcnt);
      ssize_t n = ::sendmsg(cs.ch->fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          cs.sendBlocked = true;
          break;
        }
        fail(errno == EPIPE || errno == ECONNRESET ? ErrorKind::PeerClosed : ErrorKind::System, cs,
             op, cs.sendDone,
             errno == EPIPE || errno == ECONNRESET ? "connection closed by the peer while sending"
                                                   : "send failed: " + net::errnoString(errno));
      }
      const size_t un = static_cast<size_t>(n);
      const size_t hdrPart =
          cs.sendDone < wire::kHeaderSize ? std::min(un, wire::kHeaderSize - cs.sendDone) : 0;
      cs.ch->counters.wireSent += un;
      cs.ch->counters.payloadSent += un - hdrPart;
      cs.sendDone += un;
      progress = true;
      if (cs.sendDone == wire::kHeaderSize + len) {
        cs.ch->counters.messagesSent++;
        cs.sendDone = 0;
        cs.sendHead++;
        complete(idx);
      }
    }
    return progress;
  }

  void applyAction(const Op& op, const ChanState& cs) {
    uint8_t* dst = outPtr(op);
    const size_t n = op.range.count;
    const ReduceOp rop = ctx_.op;
    if (op.action == RecvAction::Reduce) {
      reduce::apply(dst, bufPtr(op.buffer, op), cs.staging, n, ctx_.dtype, rop);
    }
    if (op.thenSelf) reduce::apply(dst, dst, bufPtr(BufferId::Input, op), n, ctx_.dtype, rop);
    if (op.finalize && rop == ReduceOp::Avg) reduce::divide(dst, n, ctx_.dtype, ctx_.worldSize);
  }

  void checkHeader(ChanState& cs, const Op& op) {
    wire::MessageHeader h;
    wire::DecodeStatus st = wire::decodeHeader(cs.recvHdr, &h);
    if (st != wire::DecodeStatus::Ok) {
      fail(ErrorKind::Protocol, cs, op, 0,
           "undecodable message header from the peer: " + std::string(wire::toString(st)));
    }
    if (h.kind == wire::MsgKind::Abort) {
      fail(ErrorKind::Aborted, cs, op, 0, "the peer aborted the communicator");
    }
    if (h.seq != ctx_.seq || h.fingerprint != ctx_.fingerprint) {
      fail(ErrorKind::Mismatch, cs, op, 0,
           "the peer is running a different collective: it sent collective #" +
               std::to_string(h.seq) + " with signature " + std::to_string(h.fingerprint) +
               ", this rank expected #" + std::to_string(ctx_.seq) + " with signature " +
               std::to_string(ctx_.fingerprint));
    }
    const uint64_t len = op.range.count * elem_;
    if (h.step != op.step || h.length != len) {
      fail(ErrorKind::Protocol, cs, op, 0,
           "message out of schedule: got step " + std::to_string(h.step) + " length " +
               std::to_string(h.length) + ", expected step " + std::to_string(op.step) +
               " length " + std::to_string(len));
    }
  }

  bool pumpRecvs(ChanState& cs) {
    bool progress = false;
    cs.recvBlocked = false;
    while (cs.recvHead < cs.recvs.size()) {
      const int32_t idx = cs.recvs[cs.recvHead];
      const Op& op = sched_.ops[static_cast<size_t>(idx)];
      const size_t len = op.range.count * elem_;
      if (!cs.landed) {
        uint8_t* target = op.action == RecvAction::Copy ? outPtr(op) : cs.staging;
        iovec iov[2];
        int iovcnt = 0;
        if (cs.recvDone < wire::kHeaderSize) {
          iov[iovcnt++] = {cs.recvHdr + cs.recvDone, wire::kHeaderSize - cs.recvDone};
          if (len > 0) iov[iovcnt++] = {target, len};
        } else {
          size_t off = cs.recvDone - wire::kHeaderSize;
          iov[iovcnt++] = {target + off, len - off};
        }
        ssize_t n = ::readv(cs.ch->fd.get(), iov, iovcnt);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            cs.recvBlocked = true;
            break;
          }
          fail(errno == ECONNRESET ? ErrorKind::PeerClosed : ErrorKind::System, cs, op, cs.recvDone,
               errno == ECONNRESET ? "connection reset by the peer"
                                   : "receive failed: " + net::errnoString(errno));
        }
        if (n == 0) {
          fail(ErrorKind::PeerClosed, cs, op, cs.recvDone, "connection closed by the peer");
        }
        const size_t un = static_cast<size_t>(n);
        const size_t before = cs.recvDone;
        const size_t hdrPart =
            before < wire::kHeaderSize ? std::min(un, wire::kHeaderSize - before) : 0;
        cs.ch->counters.wireRecv += un;
        cs.ch->counters.payloadRecv += un - hdrPart;
        cs.recvDone += un;
        progress = true;
        if (before < wire::kHeaderSize && cs.recvDone >= wire::kHeaderSize) checkHeader(cs, op);
        if (cs.recvDone < wire::kHeaderSize + len) continue;
        cs.landed = true;
        cs.ch->counters.messagesRecv++;
      }
      if (!depReady(op)) break;  // landed; its action waits for an earlier segment
      applyAction(op, cs);
      cs.landed = false;
      cs.recvDone = 0;
      cs.recvHead++;
      complete(idx);
      progress = true;
    }
    return progress;
  }

  void waitForSockets() {
    std::vector<pollfd> fds;
    fds.reserve(chans_.size());
    for (const ChanState& cs : chans_) {
      short ev = 0;
      if (cs.sendBlocked) ev |= POLLOUT;
      if (cs.recvBlocked) ev |= POLLIN;
      fds.push_back({cs.ch->fd.get(), ev, 0});
    }
    for (;;) {
      int n = ::poll(fds.data(), fds.size(), ctx_.deadline.pollTimeoutMs());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        fail(ErrorKind::System, chans_.front(), sched_.ops.front(), 0,
             "poll failed: " + net::errnoString(errno));
      if (n == 0 && ctx_.deadline.expired()) failTimeout();
      return;
    }
  }

  // The peer we are waiting on: the first channel whose receive has no data, else
  // the first whose send cannot drain.
  [[noreturn]] void failTimeout() {
    for (ChanState& cs : chans_) {
      if (cs.recvHead < cs.recvs.size() && !cs.landed && cs.recvBlocked) {
        const Op& op = sched_.ops[static_cast<size_t>(cs.recvs[cs.recvHead])];
        fail(ErrorKind::Timeout, cs, op, cs.recvDone,
             "no data from the peer before the deadline (waiting to receive)");
      }
    }
    for (ChanState& cs : chans_) {
      if (cs.sendHead < cs.sends.size() && cs.sendBlocked) {
        const Op& op = sched_.ops[static_cast<size_t>(cs.sends[cs.sendHead])];
        fail(ErrorKind::Timeout, cs, op, cs.sendDone,
             "the peer did not read our data before the deadline (waiting to send)");
      }
    }
    fail(ErrorKind::Timeout, chans_.front(), sched_.ops.front(), 0, "deadline passed");
  }

  [[noreturn]] void fail(ErrorKind kind, ChanState& cs, const Op& op, size_t moved,
                         std::string why) {
    ErrorInfo info;
    info.kind = kind;
    info.message = std::move(why);
    info.rank = ctx_.rank;
    info.peer = cs.ch->peer;
    info.peerAddress = cs.ch->address;
    info.collective = ctx_.collective;
    info.seq = ctx_.seqFull;
    info.algorithm = sched_.algorithm;
    if (const algo::Phase* ph = sched_.phaseOf(op.step)) {
      info.phase = ph->name;
      info.step = static_cast<int>(op.step - ph->firstStep);
      info.steps = static_cast<int>(ph->steps);
    }
    // `moved` counts header and payload bytes of the message; report the payload.
    info.bytesMoved =
        static_cast<int64_t>(moved > wire::kHeaderSize ? moved - wire::kHeaderSize : 0);
    info.bytesExpected = static_cast<int64_t>(op.range.count * elem_);
    info.elapsedMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start_)
            .count();
    info.timeoutMs = ctx_.timeoutMs;
    throwError(std::move(info));
  }

  const algo::Schedule& sched_;
  const ExecContext& ctx_;
  size_t elem_ = 0;
  std::vector<uint8_t> done_;
  size_t remaining_ = 0;
  std::vector<ChanState> chans_;
  Deadline::Clock::time_point start_;
};

}  // namespace

void Executor::run(const algo::Schedule& schedule, const ExecContext& ctx, Transport& transport) {
  if (schedule.ops.empty()) return;
  Run run(schedule, ctx);
  run.execute(transport, staging_);
}

}  // namespace tccl
