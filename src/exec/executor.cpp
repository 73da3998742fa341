#include "exec/executor.hpp"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/log.hpp"
#include "exec/spin.hpp"
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
  Link* link = nullptr;
  std::vector<int32_t> sends;
  std::vector<int32_t> recvs;
  size_t sendHead = 0;
  size_t recvHead = 0;
  TxFrame tx;                // the message being sent
  bool sendBlocked = false;  // the link would block
  RxFrame rx;                // the message being received
  bool landed = false;       // payload complete, action waits for a dependency
  bool recvBlocked = false;  // the link would block
  uint8_t* staging = nullptr;
  bool parked = false;  // holds the next call's message: stop watching it this call
  // A count message (Op::countMsg) being sent or received, little endian.
  uint8_t countTx[algo::kCountMsgBytes] = {};
  uint8_t countRx[algo::kCountMsgBytes] = {};
  bool reduces = false;  // a receive of the schedule reduces from this peer (staging)
};

// What a Run builds for its call, kept between calls (per thread: a run never starts
// inside another on one thread) so that a loop of small collectives allocates nothing
// here once warm: every vector keeps its capacity, its contents are reset.
struct RunScratch {
  std::vector<uint8_t> done;
  std::vector<ChanState> chans;
  std::vector<ChanState> watched;
  std::vector<int32_t> copies;
  std::vector<int32_t> chanOf;  // peer rank -> index in chans, -1: not in the schedule
  std::vector<LinkWait> waits;  // waitForLinks'
  std::vector<ChanState*> waitOwners;
};

// n channels in their initial state, each keeping its op lists' capacity.
void resetChans(std::vector<ChanState>& chans, size_t n) {
  if (chans.size() > n) chans.resize(n);
  for (ChanState& cs : chans) {
    std::vector<int32_t> sends = std::move(cs.sends);
    std::vector<int32_t> recvs = std::move(cs.recvs);
    sends.clear();
    recvs.clear();
    cs = ChanState{};
    cs.sends = std::move(sends);
    cs.recvs = std::move(recvs);
  }
  while (chans.size() < n) chans.emplace_back();
}

void putCount(uint8_t* out, uint64_t v) {
  for (size_t i = 0; i < algo::kCountMsgBytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t getCount(const uint8_t* in) {
  uint64_t v = 0;
  for (size_t i = 0; i < algo::kCountMsgBytes; ++i) v |= uint64_t{in[i]} << (8 * i);
  return v;
}

std::atomic<bool> faultFired{false};

class Run {
 public:
  Run(const algo::Schedule& s, const ExecContext& c, RunScratch& scratch)
      : sched_(s),
        ctx_(c),
        done_(scratch.done),
        chans_(scratch.chans),
        watched_(scratch.watched),
        copies_(scratch.copies),
        chanOf_(scratch.chanOf),
        waits_(scratch.waits),
        waitOwners_(scratch.waitOwners) {
    elem_ = dataTypeSize(c.dtype);
    done_.assign(s.ops.size(), 0);
    copies_.clear();
    watched_.clear();
    remaining_ = s.ops.size();
    // Elapsed times count from where the call's deadline counts (its issue), not from
    // here: a timeout must never read "waited 297 ms of 300 ms allowed".
    start_ = Deadline::Clock::now();
    if (c.timeoutMs > 0 && !c.deadline.isNever()) {
      start_ = std::min(start_, c.deadline.at() - std::chrono::milliseconds(c.timeoutMs));
    }
  }

  void execute(LinkProvider& links, std::map<int, std::vector<uint8_t>>& staging) {
    const size_t stagingBytes = sched_.maxRecvElems() * elem_;
    resetChans(chans_, sched_.peers.size());
    int maxPeer = -1;
    for (int peer : sched_.peers) maxPeer = std::max(maxPeer, peer);
    chanOf_.assign(static_cast<size_t>(maxPeer + 1), -1);
    for (size_t c = 0; c < sched_.peers.size(); ++c) {
      const int peer = sched_.peers[c];
      chanOf_[static_cast<size_t>(peer)] = static_cast<int32_t>(c);
      chans_[c].link = &links.link(peer);
    }
    for (size_t i = 0; i < sched_.ops.size(); ++i) {
      const Op& op = sched_.ops[i];
      if (op.type == OpType::Copy) {
        copies_.push_back(static_cast<int32_t>(i));
        continue;
      }
      ChanState& cs = chans_[static_cast<size_t>(chanOf_[static_cast<size_t>(op.peer)])];
      (op.type == OpType::Send ? cs.sends : cs.recvs).push_back(static_cast<int32_t>(i));
      if (op.type == OpType::Recv && op.action == RecvAction::Reduce) cs.reduces = true;
    }
    for (size_t c = 0; c < sched_.peers.size(); ++c) {
      ChanState& cs = chans_[c];
      if (!cs.reduces) continue;  // no payload of this peer lands in staging
      std::vector<uint8_t>& buf = staging[sched_.peers[c]];
      if (buf.size() < stagingBytes) buf.resize(stagingBytes);
      cs.staging = buf.data();
    }
    for (int peer : ctx_.watchPeers) {
      const size_t p = static_cast<size_t>(peer);
      if (p < chanOf_.size() && chanOf_[p] >= 0) continue;
      watched_.emplace_back().link = &links.link(peer);
    }
    if (ctx_.fault) armFault();
    auto lastProgress = Deadline::Clock::now();
    const auto spin = std::chrono::microseconds(ctx_.spinMicros);
    while (remaining_ > 0) {
      bool progress = !copies_.empty() && runCopies();
      // Sends first, on every link: what this rank owes its peers leaves before it
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
        // wait for may need this very core to make the progress we are waiting for
        // (exec/spin.hpp: not while it loses the core to other work for long).
        spinYield(ctx_.adaptiveYield);
        continue;
      }
      waitForLinks();
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

  // Local copies whose dependency is done, in schedule order (one may enable the next).
  bool runCopies() {
    bool progress = false;
    size_t kept = 0;
    for (size_t i = 0; i < copies_.size(); ++i) {
      const int32_t idx = copies_[i];
      const Op& op = sched_.ops[static_cast<size_t>(idx)];
      if (!depReady(op)) {
        copies_[kept++] = idx;
        continue;
      }
      uint8_t* dst = outPtr(op);
      const uint8_t* src = bufPtr(op.buffer, op);
      const size_t n = op.range.count;
      if (dst != src && n > 0) std::memmove(dst, src, n * elem_);
      if (op.finalize && ctx_.op == ReduceOp::Avg && n > 0) {
        reduce::divide(dst, n, ctx_.dtype, ctx_.worldSize);
      }
      complete(idx);
      progress = true;
    }
    copies_.resize(kept);
    return progress;
  }

  bool pumpSends(ChanState& cs) {
    bool progress = false;
    cs.sendBlocked = false;
    while (cs.sendHead < cs.sends.size()) {
      const int32_t idx = cs.sends[cs.sendHead];
      const Op& op = sched_.ops[static_cast<size_t>(idx)];
      if (!depReady(op)) break;
      if (cs.tx.idle()) {
        if (faultStep_ >= 0) maybeFault(op);
        wire::MessageHeader h;
        h.kind = wire::MsgKind::Data;
        h.seq = ctx_.seq;
        h.fingerprint = ctx_.fingerprint;
        h.step = op.step;
        h.length = opBytes(op);
        if (op.countMsg) putCount(cs.countTx, op.value);
        cs.tx.start(h, op.countMsg ? cs.countTx : bufPtr(op.buffer, op));
      }
      const LinkIo io = cs.tx.pump(*cs.link);
      if (io.status == LinkStatus::Blocked) {
        cs.sendBlocked = true;
        break;
      }
      if (io.status == LinkStatus::Closed) {
        fail(ErrorKind::PeerClosed, cs, op, cs.tx.sent(),
             "connection closed by the peer while sending");
      }
      if (io.status == LinkStatus::Error) {
        fail(ErrorKind::System, cs, op, cs.tx.sent(), "send failed: " + cs.link->errorText());
      }
      progress = true;
      if (cs.tx.done()) {
        cs.tx.reset();
        cs.sendHead++;
        complete(idx);
      }
    }
    return progress;
  }

  // Payload bytes of op's message.
  uint64_t opBytes(const Op& op) const {
    return op.countMsg ? algo::kCountMsgBytes : op.range.count * elem_;
  }

  // The uneven collectives' agreement: the peer's count for this pair is ours.
  void checkCount(const Op& op, const ChanState& cs) {
    const uint64_t theirs = getCount(cs.countRx);
    if (theirs == op.value) return;
    const std::string peer = std::to_string(cs.link->peer());
    const std::string me = std::to_string(ctx_.rank);
    fail(ErrorKind::Mismatch, cs, op, 0,
         std::string(kCountsDisagree) + "rank " + peer + " sends " + std::to_string(theirs) +
             " elements to rank " + me + ", but rank " + me + " expects " +
             std::to_string(op.value) + " from rank " + peer);
  }

  void applyAction(const Op& op, const ChanState& cs) {
    if (op.countMsg) return checkCount(op, cs);
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
    if (cs.rx.decodeStatus() != wire::DecodeStatus::Ok) {
      fail(ErrorKind::Protocol, cs, op, 0,
           "undecodable message header from the peer: " +
               std::string(wire::toString(cs.rx.decodeStatus())));
    }
    const wire::MessageHeader& h = cs.rx.header();
    if (h.kind == wire::MsgKind::Abort) failAbortMessage(cs, op, h);
    if (h.kind != wire::MsgKind::Data) {
      fail(ErrorKind::Protocol, cs, op, 0,
           "a point-to-point message (kind " + std::to_string(static_cast<int>(h.kind)) +
               ") on the collectives' connection");
    }
    if (h.seq != ctx_.seq || h.fingerprint != ctx_.fingerprint) {
      fail(ErrorKind::Mismatch, cs, op, 0,
           "the peer is running a different collective: it sent collective #" +
               std::to_string(h.seq) + " with signature " + std::to_string(h.fingerprint) +
               ", this rank expected #" + std::to_string(ctx_.seq) + " with signature " +
               std::to_string(ctx_.fingerprint));
    }
    const uint64_t len = opBytes(op);
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
      if (!cs.landed) {
        if (faultStep_ >= 0 && cs.rx.got() == 0) maybeFault(op);
        // Header and payload in one readv: the schedule says what comes next.
        const bool inHeader = !cs.rx.headerReady();
        if (inHeader && cs.rx.got() == 0) {
          uint8_t* into = op.countMsg                     ? cs.countRx
                          : op.action == RecvAction::Copy ? outPtr(op)
                                                          : cs.staging;
          cs.rx.expect(into, opBytes(op));
        }
        const LinkIo io = inHeader ? cs.rx.pumpHeader(*cs.link) : cs.rx.pumpPayload(*cs.link);
        if (io.status == LinkStatus::Blocked) {
          cs.recvBlocked = true;
          break;
        }
        if (io.status == LinkStatus::Closed) {
          fail(ErrorKind::PeerClosed, cs, op, cs.rx.got(), cs.link->errorText());
        }
        if (io.status == LinkStatus::Error) {
          fail(ErrorKind::System, cs, op, cs.rx.got(), "receive failed: " + cs.link->errorText());
        }
        progress = true;
        if (inHeader && cs.rx.headerReady()) checkHeader(cs, op);
        if (!cs.rx.done()) continue;
        cs.landed = true;
      }
      if (!depReady(op)) break;  // landed; its action waits for an earlier segment
      applyAction(op, cs);
      cs.landed = false;
      cs.rx.reset();
      cs.recvHead++;
      complete(idx);
      progress = true;
    }
    return progress;
  }

  void waitForLinks() {
    std::vector<LinkWait>& waits = waits_;
    std::vector<ChanState*>& owner = waitOwners_;  // per waits entry
    waits.clear();
    owner.clear();
    for (ChanState& cs : chans_) {
      // A link with nothing more expected from it is watched for trouble.
      waits.push_back({cs.link, cs.recvBlocked || watchable(cs), cs.sendBlocked, 0});
      owner.push_back(&cs);
    }
    for (ChanState& cs : watched_) {
      if (!watchable(cs)) continue;
      waits.push_back({cs.link, true, false, 0});
      owner.push_back(&cs);
    }
    if (chans_.empty()) {
      // Only local copies left, none of them ready: a copy depends on one that never runs.
      fail(ErrorKind::InvalidArgument, nullptr, sched_.ops.front(), 0,
           "the schedule cannot progress: a local copy waits for an op that never runs");
    }
    bool ready = true;
    try {
      ready = waitLinks(waits, ctx_.wakeFd, ctx_.deadline);
    } catch (const Error& e) {
      fail(ErrorKind::System, chans_.front(), sched_.ops.front(), 0,
           "poll failed: " + e.info().message);
    }
    if (!ready) failTimeout();
    if (ctx_.abortFlag && ctx_.abortFlag->load()) {
      fail(ErrorKind::Aborted, chans_.front(), currentOp(chans_.front()), 0,
           "the communicator was aborted while this call waited");
    }
    for (size_t i = 0; i < waits.size(); ++i) {
      ChanState* cs = owner[i];
      if (!waits[i].stirred()) continue;
      if (!cs->recvBlocked && watchable(*cs)) inspectIdle(*cs);
    }
  }

  // A link from which this call expects nothing (more).
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

  // Something arrived on a link this call expects nothing from. A later call's
  // message is left for that call; end-of-file, an abort, or a message of this or an
  // earlier collective (the peer's schedule disagrees with ours) fails the call now
  // instead of at the deadline.
  void inspectIdle(ChanState& cs) {
    uint8_t buf[wire::kHeaderSize];
    const LinkIo io = cs.link->peek(buf, sizeof buf);
    const Op& op = currentOp(cs);
    const bool owesSends = cs.sendHead < cs.sends.size();
    if (io.status == LinkStatus::Blocked) return;
    if (io.status == LinkStatus::Error) {
      fail(ErrorKind::System, cs, op, 0, "receive failed: " + cs.link->errorText());
    }
    if (io.status == LinkStatus::Closed) {
      // A peer that has all it needs from this call may finish and close; that is a
      // failure only if this call still owes it data (a later call finds out anyway).
      if (owesSends) fail(ErrorKind::PeerClosed, cs, op, 0, cs.link->errorText());
      cs.parked = true;
      return;
    }
    if (io.bytes < wire::kHeaderSize) {
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
      if (ahead > 0 && !owesSends) {
        cs.parked = true;
        return;
      }
      failAbortMessage(cs, op, h);
    }
    if (ahead > 0) {
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
    std::string why = "rank " + std::to_string(cs.link->peer()) + " aborted the communicator";
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
        fail(ErrorKind::Timeout, cs, op, cs.rx.got(),
             "no data from the peer before the deadline (waiting to receive)");
      }
    }
    for (ChanState& cs : chans_) {
      if (cs.sendHead < cs.sends.size() && cs.sendBlocked) {
        const Op& op = sched_.ops[static_cast<size_t>(cs.sends[cs.sendHead])];
        fail(ErrorKind::Timeout, cs, op, cs.tx.sent(),
             "the peer did not read our data before the deadline (waiting to send)");
      }
    }
    fail(ErrorKind::Timeout, chans_.front(), sched_.ops.front(), 0, "deadline passed");
  }

  [[noreturn]] void fail(ErrorKind kind, const ChanState& cs, const Op& op, size_t moved,
                         std::string why) {
    fail(kind, cs.link, op, moved, std::move(why));
  }

  // `link`: the peer involved (null: none).
  [[noreturn]] void fail(ErrorKind kind, const Link* link, const Op& op, size_t moved,
                         std::string why) {
    ErrorInfo info;
    info.kind = kind;
    info.message = std::move(why);
    info.rank = ctx_.rank;
    if (link != nullptr) {
      info.peer = link->peer();
      info.peerAddress = link->address();
    }
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
    info.bytesExpected = static_cast<int64_t>(opBytes(op));
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
  std::vector<uint8_t>& done_;
  size_t remaining_ = 0;
  std::vector<ChanState>& chans_;
  std::vector<ChanState>& watched_;  // connected peers outside the schedule
  std::vector<int32_t>& copies_;     // local copies not yet run, in schedule order
  std::vector<int32_t>& chanOf_;     // peer rank -> index in chans_ (-1: none)
  std::vector<LinkWait>& waits_;     // waitForLinks' (contents per wait)
  std::vector<ChanState*>& waitOwners_;
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

void Executor::run(const algo::Schedule& schedule, const ExecContext& ctx, LinkProvider& links) {
  if (schedule.ops.empty()) return;
  thread_local RunScratch scratch;
  Run run(schedule, ctx, scratch);
  run.execute(links, staging_);
}

}  // namespace tccl
