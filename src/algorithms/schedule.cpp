#include "algorithms/schedule.hpp"

#include <algorithm>
#include <set>

namespace tccl::algo {

uint64_t Schedule::bytesSent(size_t elemSize) const {
  uint64_t total = 0;
  for (const Op& op : ops) {
    if (op.type == OpType::Send) total += op.countMsg ? kCountMsgBytes : op.range.count * elemSize;
  }
  return total;
}

uint64_t Schedule::bytesReceived(size_t elemSize) const {
  uint64_t total = 0;
  for (const Op& op : ops) {
    if (op.type == OpType::Recv) total += op.countMsg ? kCountMsgBytes : op.range.count * elemSize;
  }
  return total;
}

size_t Schedule::maxRecvElems() const {
  size_t m = 0;
  for (const Op& op : ops) {
    if (op.type == OpType::Recv && !op.countMsg) m = std::max(m, op.range.count);
  }
  return m;
}

const Phase* Schedule::phaseOf(uint32_t step) const {
  for (const Phase& p : phases) {
    if (step >= p.firstStep && step < p.firstStep + p.steps) return &p;
  }
  return nullptr;
}

void collectPeers(Schedule& s) {
  std::set<int> peers;
  for (const Op& op : s.ops) {
    if (op.type != OpType::Copy) peers.insert(op.peer);
  }
  s.peers.assign(peers.begin(), peers.end());
}

void orderByWave(Schedule& s, const std::vector<uint32_t>& wave) {
  const size_t n = s.ops.size();
  std::vector<int32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return wave[static_cast<size_t>(a)] < wave[static_cast<size_t>(b)];
  });
  std::vector<int32_t> newIndex(n);
  for (size_t i = 0; i < n; ++i) newIndex[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
  std::vector<Op> ops;
  ops.reserve(n);
  for (const int32_t old : order) {
    Op op = s.ops[static_cast<size_t>(old)];
    if (op.dependsOn >= 0) op.dependsOn = newIndex[static_cast<size_t>(op.dependsOn)];
    ops.push_back(op);
  }
  s.ops = std::move(ops);
}

int32_t addSend(Schedule& s, int peer, uint32_t step, Range range, BufferId from,
                int32_t dependsOn) {
  Op op;
  op.type = OpType::Send;
  op.peer = peer;
  op.step = step;
  op.range = range;
  op.buffer = from;
  op.dependsOn = dependsOn;
  s.ops.push_back(op);
  return static_cast<int32_t>(s.ops.size() - 1);
}

namespace {
int32_t addCountMsg(Schedule& s, OpType type, int peer, uint32_t step, uint64_t count) {
  Op op;
  op.type = type;
  op.peer = peer;
  op.step = step;
  op.countMsg = true;
  op.value = count;
  s.ops.push_back(op);
  return static_cast<int32_t>(s.ops.size() - 1);
}
}  // namespace

int32_t addCountSend(Schedule& s, int peer, uint32_t step, uint64_t count) {
  return addCountMsg(s, OpType::Send, peer, step, count);
}

int32_t addCountRecv(Schedule& s, int peer, uint32_t step, uint64_t count) {
  return addCountMsg(s, OpType::Recv, peer, step, count);
}

int32_t addLocalCopy(Schedule& s, Range range, BufferId from, BufferId into, int32_t dependsOn,
                     bool finalize) {
  Op op;
  op.type = OpType::Copy;
  op.peer = -1;
  op.range = range;
  op.buffer = from;
  op.dst = into;
  op.dependsOn = dependsOn;
  op.finalize = finalize;
  s.ops.push_back(op);
  return static_cast<int32_t>(s.ops.size() - 1);
}

int32_t addRecv(Schedule& s, int peer, uint32_t step, Range range, RecvAction action,
                BufferId operand, BufferId dst, int32_t dependsOn, bool finalize) {
  Op op;
  op.type = OpType::Recv;
  op.peer = peer;
  op.step = step;
  op.range = range;
  op.action = action;
  op.buffer = operand;
  op.dst = dst;
  op.dependsOn = dependsOn;
  op.finalize = finalize;
  s.ops.push_back(op);
  return static_cast<int32_t>(s.ops.size() - 1);
}

Schedule naiveAllreduce(int rank, int n, size_t count, size_t segElems) {
  Schedule s;
  s.algorithm = "naive";
  s.phases.push_back({"exchange", 0, n > 1 ? 1u : 0u});
  if (n <= 1 || count == 0) return s;
  const Range all{0, count};
  const size_t segs = segmentCount(count, segElems);
  // Sends: the whole input to every other peer, starting with the next rank so that
  // not every rank sends to rank 0 first.
  for (int d = 1; d < n; ++d) {
    int peer = mod(int64_t{rank} + d, n);
    for (size_t k = 0; k < segs; ++k) {
      Op op;
      op.type = OpType::Send;
      op.peer = peer;
      op.range = segmentRange(all, segElems, k);
      op.buffer = BufferId::Input;
      s.ops.push_back(op);
    }
  }
  // Receives: for segment k, contributions fold in rank order. The first peer's
  // payload either lands as-is (Copy) or, when this rank is rank 0, reduces against
  // the input. This rank's own contribution is folded right after rank-1's.
  const int last = (rank == n - 1) ? n - 2 : n - 1;
  for (size_t k = 0; k < segs; ++k) {
    int32_t prevIdx = -1;
    bool first = true;
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      Op op;
      op.type = OpType::Recv;
      op.peer = p;
      op.range = segmentRange(all, segElems, k);
      if (first) {
        op.action = rank == 0 ? RecvAction::Reduce : RecvAction::Copy;
        op.buffer = BufferId::Input;
      } else {
        op.action = RecvAction::Reduce;
        op.buffer = BufferId::Output;
      }
      op.thenSelf = (p == rank - 1);
      op.finalize = (p == last);
      op.dependsOn = prevIdx;
      prevIdx = static_cast<int32_t>(s.ops.size());
      s.ops.push_back(op);
      first = false;
    }
  }
  collectPeers(s);
  return s;
}

Schedule ringAllreduce(int rank, int n, size_t count, size_t segElems, size_t elemSize) {
  Schedule s;
  s.algorithm = "ring";
  const uint32_t steps = n > 1 ? static_cast<uint32_t>(n - 1) : 0;
  s.phases.push_back({"reduce-scatter", 0, steps});
  s.phases.push_back({"all-gather", steps, steps});
  if (n <= 1 || count == 0) return s;
  const int next = ring::next(rank, n);
  const int prev = ring::prev(rank, n);

  // lastRecv[k]: index of the receive of segment k in the previous step (the send of
  // segment k in this step forwards what it received).
  std::vector<int32_t> lastRecv;
  std::vector<uint32_t> segmentOf;  // per op: its segment k within its step
  auto emitStep = [&](uint32_t step, int sendChunk, int recvChunk, bool reduce, bool finalize,
                      BufferId sendBuffer) {
    const Range sc = chunkRange(count, n, sendChunk);
    const Range rc = chunkRange(count, n, recvChunk);
    const size_t sendSegs = segmentCount(sc.count, segElems);
    const size_t recvSegs = segmentCount(rc.count, segElems);
    std::vector<int32_t> thisRecv(recvSegs, -1);
    // Interleave sends and receives segment by segment; the executor keeps a FIFO
    // per peer and direction, so this order only fixes the order within each.
    for (size_t k = 0; k < std::max(sendSegs, recvSegs); ++k) {
      if (k < sendSegs) {
        Op op;
        op.type = OpType::Send;
        op.peer = next;
        op.step = step;
        op.range = segmentRange(sc, segElems, k);
        op.buffer = sendBuffer;
        op.dependsOn = k < lastRecv.size() ? lastRecv[k] : -1;
        s.ops.push_back(op);
        segmentOf.push_back(static_cast<uint32_t>(k));
      }
      if (k < recvSegs) {
        Op op;
        op.type = OpType::Recv;
        op.peer = prev;
        op.step = step;
        op.range = segmentRange(rc, segElems, k);
        op.action = reduce ? RecvAction::Reduce : RecvAction::Copy;
        op.buffer = BufferId::Input;  // reduce-scatter: Output = Input op payload
        op.finalize = finalize;
        thisRecv[k] = static_cast<int32_t>(s.ops.size());
        s.ops.push_back(op);
        segmentOf.push_back(static_cast<uint32_t>(k));
      }
    }
    lastRecv = std::move(thisRecv);
  };

  for (uint32_t st = 0; st < steps; ++st) {
    const int sst = static_cast<int>(st);
    emitStep(st, ring::rsSendChunk(rank, n, sst), ring::rsRecvChunk(rank, n, sst), true,
             st + 1 == steps, st == 0 ? BufferId::Input : BufferId::Output);
  }
  for (uint32_t st = 0; st < steps; ++st) {
    const int sst = static_cast<int>(st);
    emitStep(steps + st, ring::agSendChunk(rank, n, sst), ring::agRecvChunk(rank, n, sst), false,
             false, BufferId::Output);
  }
  // Two ranks and large data: segment k's reduce-scatter, then its all-gather, then
  // segment k+1's. Each reduced segment leaves while still in the cache (it waits only
  // for the peer's first segment, not for this rank's whole first step): 9% faster at
  // 64 MiB here. Below kRingWaveMinBytes the step order is faster (every reduce-scatter
  // send leaves at once, where the wave order holds segment k+1's behind segment k's
  // round trip: 12-24 % at 1 to 16 MiB, docs/PERFORMANCE.md); with more ranks, the
  // step-by-step order measured as fast or faster.
  if (n == 2 && (elemSize == 0 || count * elemSize >= kRingWaveMinBytes)) orderByWave(s, segmentOf);
  collectPeers(s);
  return s;
}

}  // namespace tccl::algo
