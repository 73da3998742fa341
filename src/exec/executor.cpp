#include "exec/executor.hpp"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>
#include <thread>

#include "base/log.hpp"
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
  bool parked = false;  // holds the next call's message: stop watching it this call
};

std::atomic<bool> faultFired{false};

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
    for (int peer : ctx_.watchPeers) {
      if (index.count(peer)) continue;
      ChanState cs;
      cs.ch = &transport.channel(peer);
      watched_.push_back(cs);
    }
    if (ctx_.fault) armFault();
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
        if (faultStep_ >= 0) maybeFault(op);
        wire::MessageHeader h;
        h.kind = wire::MsgKind::Data;
        h.flags = ctx_.p2p ? wire::kFlagP2P : 0;
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
      cs.ch->txPartial = true;
      progress = true;
      if (cs.sendDone == wire::kHeaderSize + len) {
        cs.ch->counters.messagesSent++;
        cs.ch->txPartial = false;
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
    if (h.kind == wire::MsgKind::Abort) failAbortMessage(cs, op, h);
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
        if (faultStep_ >= 0 && cs.recvDone == 0) maybeFault(op);
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
    std::vector<ChanState*> owner;  // per fds entry; null for the wake descriptor
    fds.reserve(chans_.size() + watched_.size() + 1);
    for (ChanState& cs : chans_) {
      short ev = 0;
      if (cs.sendBlocked) ev |= POLLOUT;
      if (cs.recvBlocked) {
        ev |= POLLIN;
      } else if (watchable(cs)) {
        ev |= POLLIN;  // nothing more expected from it: watch for trouble
      }
      fds.push_back({cs.ch->fd.get(), ev, 0});
      owner.push_back(&cs);
    }
    for (ChanState& cs : watched_) {
      if (!watchable(cs)) continue;
      fds.push_back({cs.ch->fd.get(), POLLIN, 0});
      owner.push_back(&cs);
    }
    if (ctx_.wakeFd >= 0) {
      fds.push_back({ctx_.wakeFd, POLLIN, 0});
      owner.push_back(nullptr);
    }
    for (;;) {
      int n = ::poll(fds.data(), fds.size(), ctx_.deadline.pollTimeoutMs());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        fail(ErrorKind::System, chans_.front(), sched_.ops.front(), 0,
             "poll failed: " + net::errnoString(errno));
      if (n == 0 && ctx_.deadline.expired()) failTimeout();
      break;
    }
    if (ctx_.abortFlag && ctx_.abortFlag->load()) {
      fail(ErrorKind::Aborted, chans_.front(), currentOp(chans_.front()), 0,
           "the communicator was aborted while this call waited");
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      ChanState* cs = owner[i];
      if (!cs || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (!cs->recvBlocked && watchable(*cs)) inspectIdle(*cs);
    }
  }

  // A channel from which this call expects nothing (more).
  bool watchable(const ChanState& cs) const {
    return !cs.parked && cs.recvHead >= cs.recvs.size() && !cs.landed;
  }

  const Op& currentOp(const ChanState& cs) const {
    if (cs.recvHead < cs.recvs.size())
      return sched_.ops[static_cast<size_t>(cs.recvs[cs.recvHead])];
    if (cs.sendHead < cs.sends.size())
      return sched_.ops[static_cast<size_t>(cs.sends[cs.sendHead])];
    return sched_.ops.back();
  }

  // Something arrived on a channel this call expects nothing from. A later call's
  // message is left for that call; end-of-file, an abort, or a message of this or an
  // earlier collective (the peer's schedule disagrees with ours) fails the call now
  // instead of at the deadline.
  void inspectIdle(ChanState& cs) {
    uint8_t buf[wire::kHeaderSize];
    ssize_t n = ::recv(cs.ch->fd.get(), buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    const Op& op = currentOp(cs);
    const bool owesSends = cs.sendHead < cs.sends.size();
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      if (errno != ECONNRESET)
        fail(ErrorKind::System, cs, op, 0, "receive failed: " + net::errnoString(errno));
      if (owesSends) fail(ErrorKind::PeerClosed, cs, op, 0, "connection reset by the peer");
      cs.parked = true;
      return;
    }
    if (n == 0) {
      // A peer that has all it needs from this call may finish and close; that is a
      // failure only if this call still owes it data (a later call finds out anyway).
      if (owesSends) fail(ErrorKind::PeerClosed, cs, op, 0, "connection closed by the peer");
      cs.parked = true;
      return;
    }
    if (static_cast<size_t>(n) < wire::kHeaderSize) {
      cs.parked = true;  // a header on its way; judged when it is read
      return;
    }
    wire::MessageHeader h;
    if (wire::decodeHeader(buf, &h) != wire::DecodeStatus::Ok) {
      fail(ErrorKind::Protocol, cs, op, 0, "undecodable message header from the peer");
    }
    const int32_t ahead = static_cast<int32_t>(h.seq - ctx_.seq);
    if (h.kind == wire::MsgKind::Abort) {
      // An abort sent from a later collective: the peer finished this one, so it owes
      // this call nothing and is owed nothing. Finish the call and let the next one
      // read the abort: a rank that was merely slow then reaches the collective where
      // the failure happened and reports what it runs there, which a mismatch verdict
      // (the majority at that collective) needs.
      if (ahead > 0 && !owesSends && !ctx_.p2p) {
        cs.parked = true;
        return;
      }
      failAbortMessage(cs, op, h);
    }
    if ((h.flags & wire::kFlagP2P) || ctx_.p2p || ahead > 0) {
      cs.parked = true;  // a later call's message
      return;
    }
    fail(ErrorKind::Mismatch, cs, op, 0,
         "the peer sent a message of collective #" + std::to_string(h.seq) + " (signature " +
             std::to_string(h.fingerprint) + ", step " + std::to_string(h.step) +
             ") that this rank's collective #" + std::to_string(ctx_.seq) + " (signature " +
             std::to_string(ctx_.fingerprint) +
             ") does not expect: the ranks run different collectives or algorithms");
  }

  [[noreturn]] void failAbortMessage(ChanState& cs, const Op& op, const wire::MessageHeader& h) {
    // The culprit field is a hint from the peer: only a rank of this world counts.
    abortCulprit_ = h.fingerprint < static_cast<uint32_t>(ctx_.worldSize)
                        ? static_cast<int>(h.fingerprint)
                        : -1;
    std::string why = "rank " + std::to_string(cs.ch->peer) + " aborted the communicator";
    if (abortCulprit_ >= 0) why += " (culprit rank " + std::to_string(abortCulprit_) + ")";
    fail(ErrorKind::Aborted, cs, op, 0, why);
  }

  // ---- fault injection (TCCL_FAULT) ----
  void armFault() {
    const FaultSpec& f = *ctx_.fault;
    if (faultFired.load()) return;
    if (f.phase == "start") {
      fire();
      return;
    }
    for (const algo::Phase& ph : sched_.phases) {
      if (ph.name.compare(0, f.phase.size(), f.phase) != 0) continue;
      if (f.step < 1 || static_cast<uint32_t>(f.step) > ph.steps) continue;
      faultStep_ = static_cast<int64_t>(ph.firstStep) + f.step - 1;
      return;
    }
  }

  void maybeFault(const Op& op) {
    if (static_cast<int64_t>(op.step) < faultStep_) return;
    faultStep_ = -1;
    fire();
  }

  void fire() {
    if (faultFired.exchange(true)) return;
    const FaultSpec& f = *ctx_.fault;
    static const char* const kNames[] = {"exit", "stop", "hang", "slow"};
    TCCL_WARN("TCCL_FAULT: injecting " << kNames[static_cast<int>(f.action)] << " in "
                                       << ctx_.collective << " #" << ctx_.seqFull);
    switch (f.action) {
      case FaultSpec::Action::Slow:
        std::this_thread::sleep_for(std::chrono::milliseconds(f.slowMs));
        break;
      case FaultSpec::Action::Exit:
        ::_exit(43);
      case FaultSpec::Action::Stop:
        ::raise(SIGSTOP);
        break;
      case FaultSpec::Action::Hang:
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
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
    if (kind == ErrorKind::Aborted) info.culprit = abortCulprit_;
    throwError(std::move(info));
  }

  const algo::Schedule& sched_;
  const ExecContext& ctx_;
  size_t elem_ = 0;
  std::vector<uint8_t> done_;
  size_t remaining_ = 0;
  std::vector<ChanState> chans_;
  std::vector<ChanState> watched_;  // connected peers outside the schedule
  Deadline::Clock::time_point start_;
  int64_t faultStep_ = -1;  // the global step at which TCCL_FAULT fires
  int abortCulprit_ = -1;
};

}  // namespace

std::optional<FaultSpec> FaultSpec::parse(const std::string& text, std::string* error) {
  FaultSpec f;
  auto bad = [&](const std::string& why) -> std::optional<FaultSpec> {
    if (error) *error = "TCCL_FAULT='" + text + "': " + why;
    return std::nullopt;
  };
  size_t at = text.find('@');
  if (at == std::string::npos)
    return bad("expected <exit|stop|hang|slow<ms>>@<phase>:<step>[#<seq>]");
  const std::string action = text.substr(0, at);
  if (action.size() > 4 && action.compare(0, 4, "slow") == 0) {
    f.action = Action::Slow;
    try {
      size_t used = 0;
      f.slowMs = std::stoll(action.substr(4), &used);
      if (used != action.size() - 4 || f.slowMs < 0) return bad("bad slow<ms>");
    } catch (...) {
      return bad("bad slow<ms>");
    }
  } else if (action == "exit") {
    f.action = Action::Exit;
  } else if (action == "stop") {
    f.action = Action::Stop;
  } else if (action == "hang") {
    f.action = Action::Hang;
  } else {
    return bad("unknown action '" + action + "' (exit, stop, hang or slow<ms>)");
  }
  std::string rest = text.substr(at + 1);
  size_t hash = rest.find('#');
  if (hash != std::string::npos) {
    try {
      size_t used = 0;
      f.seq = std::stoll(rest.substr(hash + 1), &used);
      if (used != rest.size() - hash - 1 || f.seq < 0) return bad("bad sequence number");
    } catch (...) {
      return bad("bad sequence number");
    }
    rest = rest.substr(0, hash);
  }
  if (rest == "start") {
    f.phase = "start";
    return f;
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("expected <phase>:<step>");
  f.phase = rest.substr(0, colon);
  try {
    size_t used = 0;
    f.step = std::stoi(rest.substr(colon + 1), &used);
    if (used != rest.size() - colon - 1 || f.step < 1) return bad("bad step (1-based)");
  } catch (...) {
    return bad("bad step (1-based)");
  }
  return f;
}

void Executor::run(const algo::Schedule& schedule, const ExecContext& ctx, Transport& transport) {
  if (schedule.ops.empty()) return;
  Run run(schedule, ctx);
  run.execute(transport, staging_);
}

}  // namespace tccl
