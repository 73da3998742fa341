#include "sim/replay.hpp"

#include <algorithm>
#include <chrono>
#include <simgrid/s4u.hpp>
#include <string>

#include "tccl/error.hpp"

namespace sg4 = simgrid::s4u;

namespace tccl::sim {
namespace {

// An op as the replay needs it: 16 bytes, so that 4,096 ranks of ring steps (33 M ops)
// fit in memory together.
struct SimOp {
  int32_t peer = -1;
  int32_t dependsOn = -1;
  uint32_t elems = 0;
  algo::OpType type = algo::OpType::Send;
  uint8_t reducePasses = 0;  // Recv: 1 for a Reduce action, +1 for thenSelf
};

// One peer's two FIFOs (op indices in schedule order) and what is in flight on them.
struct Channel {
  int peer = -1;
  std::vector<int32_t> sends, recvs;
  size_t sendHead = 0, recvHead = 0;
  bool sending = false, receiving = false, landed = false, dirty = false;
  sg4::Mailbox* out = nullptr;
  sg4::Mailbox* in = nullptr;
  void* sink = nullptr;  // get_async's destination for the (meaningless) payload pointer
};

std::string mailboxName(int from, int to) {
  return std::to_string(from) + ">" + std::to_string(to);
}

class RankActor {
 public:
  RankActor(const ReplayConfig& cfg, int rank, RankStats* stats)
      : cfg_(cfg), rank_(rank), stats_(stats) {}

  void operator()() {
    load();
    for (size_t c = 0; c < chans_.size(); ++c) markDirty(static_cast<int32_t>(c));
    while (true) {
      while (!dirty_.empty()) {
        const int32_t c = dirty_.back();
        dirty_.pop_back();
        chans_[static_cast<size_t>(c)].dirty = false;
        service(chans_[static_cast<size_t>(c)]);
      }
      runCopies();
      if (remaining_ == 0) break;
      // Ops left and nothing in flight: a schedule that deadlocks. The actor ends
      // unfinished (replay reports it; an exception would end the whole simulation).
      if (comms_.empty()) return;
      const ssize_t i = sg4::Comm::wait_any(comms_);
      const auto k = static_cast<size_t>(i);
      const int32_t tag = tags_[k];
      comms_[k] = comms_.back();
      tags_[k] = tags_.back();
      comms_.pop_back();
      tags_.pop_back();
      Channel& ch = chans_[static_cast<size_t>(tag >> 1)];
      if ((tag & 1) == 0) {
        ch.sending = false;
        complete(ch.sends[ch.sendHead++]);
      } else {
        ch.receiving = false;
        ch.landed = true;
      }
      markDirty(tag >> 1);
    }
    stats_->finishSec = sg4::Engine::get_clock();
    stats_->finished = true;
  }

 private:
  // Builds this rank's schedule with the table's builder and keeps only what the replay
  // needs (the full Schedule is freed before the simulation moves on).
  void load() {
    algo::BuildArgs a;
    a.collective = cfg_.collective;
    a.rank = rank_;
    a.n = static_cast<int>(cfg_.hostOfRank.size());
    a.root = algo::spec(cfg_.collective).rooted ? cfg_.root : -1;
    a.count = cfg_.count;
    a.segElems = cfg_.segElems;
    a.algorithm = cfg_.algorithm;
    a.hosts = cfg_.layout;
    const algo::Schedule s = algo::build(a).schedule;
    ops_.resize(s.ops.size());
    std::vector<int32_t> chanOfPeer(static_cast<size_t>(a.n), -1);
    for (int p : s.peers) {
      chanOfPeer[static_cast<size_t>(p)] = static_cast<int32_t>(chans_.size());
      Channel ch;
      ch.peer = p;
      ch.out = sg4::Mailbox::by_name(mailboxName(rank_, p));
      ch.in = sg4::Mailbox::by_name(mailboxName(p, rank_));
      chans_.push_back(std::move(ch));
    }
    chanOfOp_.assign(s.ops.size(), -1);
    std::vector<uint32_t> fanout(s.ops.size() + 1, 0);
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const algo::Op& op = s.ops[i];
      SimOp& o = ops_[i];
      o.type = op.type;
      o.peer = op.peer;
      o.dependsOn = op.dependsOn;
      o.elems = static_cast<uint32_t>(op.range.count);
      if (op.type == algo::OpType::Recv) {
        o.reducePasses = static_cast<uint8_t>((op.action == algo::RecvAction::Reduce ? 1 : 0) +
                                              (op.thenSelf ? 1 : 0));
      }
      if (op.type == algo::OpType::Copy) {
        copies_.push_back(static_cast<int32_t>(i));
      } else {
        const int32_t c = chanOfPeer[static_cast<size_t>(op.peer)];
        chanOfOp_[i] = c;
        Channel& ch = chans_[static_cast<size_t>(c)];
        (op.type == algo::OpType::Send ? ch.sends : ch.recvs).push_back(static_cast<int32_t>(i));
      }
      if (op.dependsOn >= 0) ++fanout[static_cast<size_t>(op.dependsOn) + 1];
    }
    // Who waits on whom, as compressed rows: a completion wakes only its dependents'
    // channels, so that a rank with thousands of peers (naive) costs O(1) per event.
    for (size_t i = 1; i < fanout.size(); ++i) fanout[i] += fanout[i - 1];
    depStart_ = fanout;
    dependents_.resize(fanout.back());
    for (size_t i = 0; i < s.ops.size(); ++i) {
      if (s.ops[i].dependsOn >= 0)
        dependents_[fanout[static_cast<size_t>(s.ops[i].dependsOn)]++] = static_cast<int32_t>(i);
    }
    done_.assign(s.ops.size(), 0);
    remaining_ = s.ops.size();
  }

  bool ready(int32_t i) const {
    const int32_t d = ops_[static_cast<size_t>(i)].dependsOn;
    return d < 0 || done_[static_cast<size_t>(d)] != 0;
  }

  void markDirty(int32_t c) {
    Channel& ch = chans_[static_cast<size_t>(c)];
    if (!ch.dirty) {
      ch.dirty = true;
      dirty_.push_back(c);
    }
  }

  void complete(int32_t i) {
    done_[static_cast<size_t>(i)] = 1;
    --remaining_;
    for (uint32_t k = depStart_[static_cast<size_t>(i)]; k < depStart_[static_cast<size_t>(i) + 1];
         ++k) {
      const int32_t c = chanOfOp_[static_cast<size_t>(dependents_[k])];
      if (c >= 0) markDirty(c);
    }
  }

  uint64_t bytes(const SimOp& o) const { return uint64_t{o.elems} * cfg_.elemSize; }

  void service(Channel& ch) {
    const int32_t self = static_cast<int32_t>(&ch - chans_.data());
    if (!ch.sending && ch.sendHead < ch.sends.size() && ready(ch.sends[ch.sendHead])) {
      const SimOp& o = ops_[static_cast<size_t>(ch.sends[ch.sendHead])];
      double sendCpu = cfg_.messageOverheadSec;
      if (cfg_.copyBytesPerSec > 0) sendCpu += static_cast<double>(bytes(o)) / cfg_.copyBytesPerSec;
      if (sendCpu > 0) cpu(sendCpu);
      comms_.push_back(ch.out->put_async(&ch, bytes(o) + kHeaderBytes));
      tags_.push_back(self << 1);
      ch.sending = true;
      stats_->bytesSent += bytes(o);
      ++stats_->messagesSent;
    }
    while (ch.recvHead < ch.recvs.size()) {
      const int32_t idx = ch.recvs[ch.recvHead];
      if (!ch.landed) {
        if (!ch.receiving) {
          comms_.push_back(ch.in->get_async(&ch.sink));
          tags_.push_back((self << 1) | 1);
          ch.receiving = true;
        }
        break;
      }
      if (!ready(idx)) break;
      const SimOp& o = ops_[static_cast<size_t>(idx)];
      if (o.reducePasses > 0 && o.elems > 0) {
        cpu(static_cast<double>(bytes(o) * o.reducePasses) / cfg_.reduceBytesPerSec);
        stats_->bytesReduced += bytes(o) * o.reducePasses;
      }
      stats_->bytesReceived += bytes(o);
      ch.landed = false;
      ++ch.recvHead;
      complete(idx);
    }
  }

  // `sec` of one idle core of this rank's host (longer when its cores are shared).
  static void cpu(double sec) {
    sg4::this_actor::execute(sec * sg4::this_actor::get_host()->get_speed());
  }

  void runCopies() {
    bool progress = true;
    while (progress) {
      progress = false;
      size_t kept = 0;
      for (int32_t i : copies_) {
        if (ready(i)) {
          complete(i);
          progress = true;
        } else {
          copies_[kept++] = i;
        }
      }
      copies_.resize(kept);
    }
  }

  const ReplayConfig& cfg_;
  const int rank_;
  RankStats* stats_;
  std::vector<SimOp> ops_;
  std::vector<Channel> chans_;
  std::vector<int32_t> chanOfOp_, copies_, dependents_, dirty_;
  std::vector<uint32_t> depStart_;
  std::vector<uint8_t> done_;
  size_t remaining_ = 0;
  std::vector<sg4::CommPtr> comms_;
  std::vector<int32_t> tags_;  // channel << 1 | (1 for a receive)
};

}  // namespace

ReplayResult replay(const ReplayConfig& cfg) {
  const int n = static_cast<int>(cfg.hostOfRank.size());
  if (n < 1) throwError(ErrorKind::InvalidArgument, "simulate: no ranks");
  if (!(cfg.reduceBytesPerSec > 0)) {
    throwError(ErrorKind::InvalidArgument, "simulate: the reduction rate must be positive");
  }
  // The table's own checks, before any actor starts (an exception inside an actor would
  // end the simulation less politely).
  algo::BuildArgs probe;
  probe.collective = cfg.collective;
  probe.n = n;
  probe.root = algo::spec(cfg.collective).rooted ? cfg.root : -1;
  probe.algorithm = cfg.algorithm;
  probe.count = 0;
  probe.hosts = cfg.layout;
  (void)algo::build(probe);
  if (cfg.count > UINT32_MAX) {
    throwError(ErrorKind::InvalidArgument, "simulate: at most 2^32-1 elements per block");
  }

  ReplayResult r;
  r.ranks.resize(static_cast<size_t>(n));
  const double start = sg4::Engine::get_clock();
  const auto wall0 = std::chrono::steady_clock::now();
  for (int rank = 0; rank < n; ++rank) {
    sg4::Actor::create("rank-" + std::to_string(rank), cfg.hostOfRank[static_cast<size_t>(rank)],
                       RankActor(cfg, rank, &r.ranks[static_cast<size_t>(rank)]));
  }
  sg4::Engine::get_instance()->run();
  r.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  for (size_t rank = 0; rank < r.ranks.size(); ++rank) {
    if (!r.ranks[rank].finished) {
      throwError(ErrorKind::Protocol, "simulate: rank " + std::to_string(rank) +
                                          " never finished (the schedules deadlock)");
    }
  }
  for (RankStats& s : r.ranks) {
    s.finishSec = std::max(0.0, s.finishSec - start);
    r.seconds = std::max(r.seconds, s.finishSec);
    r.messages += s.messagesSent;
  }
  return r;
}

}  // namespace tccl::sim
