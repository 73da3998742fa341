#include "sim/rank_state.hpp"

namespace tccl::sim::detail {

void RankState::load() {
  algo::BuildArgs a;
  a.collective = cfg_.collective;
  a.rank = rank_;
  a.n = static_cast<int>(cfg_.hostOfRank.size());
  a.root = algo::spec(cfg_.collective).rooted ? cfg_.root : -1;
  a.count = cfg_.count;
  a.segElems = cfg_.segElems;
  a.algorithm = cfg_.algorithm;
  a.hosts = cfg_.layout;
  a.elemSize = cfg_.elemSize;
  const algo::Schedule s = algo::build(a).schedule;
  ops_.resize(s.ops.size());
  std::vector<int32_t> chanOfPeer(static_cast<size_t>(a.n), -1);
  for (int p : s.peers) {
    chanOfPeer[static_cast<size_t>(p)] = static_cast<int32_t>(chans_.size());
    Channel ch;
    ch.peer = p;
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
  for (size_t c = 0; c < chans_.size(); ++c) markDirty(static_cast<int32_t>(c));
}

void RankState::progress() {
  while (true) {
    while (!dirty_.empty()) {
      const int32_t c = dirty_.back();
      dirty_.pop_back();
      chans_[static_cast<size_t>(c)].dirty = false;
      service(c);
    }
    runCopies();
    // A copy's completion may have made a channel's head ready: serve it at this
    // instant, as the executor would, not at the next comm's completion.
    if (dirty_.empty()) return;
  }
}

void RankState::sendDone(int32_t c) {
  Channel& ch = chans_[static_cast<size_t>(c)];
  ch.sending = false;
  complete(ch.sends[ch.sendHead++]);
  markDirty(c);
}

void RankState::recvLanded(int32_t c) {
  Channel& ch = chans_[static_cast<size_t>(c)];
  ch.receiving = false;
  ch.landed = true;
  markDirty(c);
}

void RankState::markFinished(double now) {
  stats_->finishSec = now;
  stats_->finished = true;
}

void RankState::markDirty(int32_t c) {
  Channel& ch = chans_[static_cast<size_t>(c)];
  if (!ch.dirty) {
    ch.dirty = true;
    dirty_.push_back(c);
  }
}

void RankState::complete(int32_t i) {
  done_[static_cast<size_t>(i)] = 1;
  --remaining_;
  for (uint32_t k = depStart_[static_cast<size_t>(i)]; k < depStart_[static_cast<size_t>(i) + 1];
       ++k) {
    const int32_t c = chanOfOp_[static_cast<size_t>(dependents_[k])];
    if (c >= 0) markDirty(c);
  }
}

void RankState::postSend(int32_t c) {
  Channel& ch = chans_[static_cast<size_t>(c)];
  const SimOp& o = ops_[static_cast<size_t>(ch.sends[ch.sendHead])];
  startSend(c, bytes(o) + kHeaderBytes);
  ch.sending = true;
  stats_->bytesSent += bytes(o);
  ++stats_->messagesSent;
}

void RankState::applyRecv(int32_t c) {
  Channel& ch = chans_[static_cast<size_t>(c)];
  const int32_t idx = ch.recvs[ch.recvHead];
  const SimOp& o = ops_[static_cast<size_t>(idx)];
  if (o.reducePasses > 0 && o.elems > 0) stats_->bytesReduced += bytes(o) * o.reducePasses;
  stats_->bytesReceived += bytes(o);
  ch.landed = false;
  ++ch.recvHead;
  complete(idx);
}

void RankState::service(int32_t c) {
  Channel& ch = chans_[static_cast<size_t>(c)];
  if (!ch.sending && ch.sendHead < ch.sends.size() && ready(ch.sends[ch.sendHead])) {
    const SimOp& o = ops_[static_cast<size_t>(ch.sends[ch.sendHead])];
    double sendCpu = cfg_.messageOverheadSec;
    if (cfg_.copyBytesPerSec > 0) sendCpu += static_cast<double>(bytes(o)) / cfg_.copyBytesPerSec;
    if (sendCpu > 0) cpu(sendCpu);
    postSend(c);
  }
  while (ch.recvHead < ch.recvs.size()) {
    const int32_t idx = ch.recvs[ch.recvHead];
    if (!ch.landed) {
      if (!ch.receiving) {
        startRecv(c);
        ch.receiving = true;
      }
      break;
    }
    if (!ready(idx)) break;
    const SimOp& o = ops_[static_cast<size_t>(idx)];
    if (o.reducePasses > 0 && o.elems > 0)
      cpu(static_cast<double>(bytes(o) * o.reducePasses) / cfg_.reduceBytesPerSec);
    applyRecv(c);
  }
}

void RankState::runCopies() {
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

}  // namespace tccl::sim::detail
