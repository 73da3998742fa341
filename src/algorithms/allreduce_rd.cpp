// Recursive doubling all-reduce: over p = 2^L ranks, rounds k = 0..L-1 exchange the
// whole partial result with the partner v ^ 2^k and reduce what arrives; after round k
// every rank holds the reduction of its aligned group of 2^(k+1) ranks. For tiny
// messages: L messages in sequence, the fewest of any algorithm here.
//
// Fold (n not a power of two): as in halving-doubling (allreduce_hd.cpp), odd rank
// 2i+1 < 2 rem hands its input to rank 2i and gets the result back.
// Steps: L + 2 [rem > 0] rounds; messages in sequence (the latency term): L, or L + 1
// when folding, + 1 more when rem > p/2 (a core rank that does not fold sends its round-0
// message at once, so the fold-in hop overlaps unless both partners of some exchange
// chain were folded). Bytes sent: L x V for a core rank, (L+1) x V for an even
// fold rank, V for an odd one (rdBytesSent). Segments: the vector [0, count) cut in
// segments of S elements, the same cut in every round.
//
// One buffer, no scratch. Per segment the ops form a chain
//   send(round 0) -> recv(round 0) -> send(round 1) -> recv(round 1) -> ...
// where "->" is dependsOn: a round's receive lands in staging at once but reduces
// (Output = Output op received) only after this round's send of the same segment has
// left, so the send never reads a half-updated partial (no write-after-read hazard),
// and the next round's send reads the updated partial.
//
// Operand order: each rank computes (its partial) op (the partner's partial), so the
// two partners evaluate a op b and b op a. Every rank combines the same groups in the
// same tree shape, so results are bitwise identical on all ranks whenever op is
// commutative elementwise: sum, prod and avg of integers and of IEEE floats (a + b ==
// b + a exactly, float16/bfloat16 included), min/max of integers. Not guaranteed for
// min/max of floats when a NaN or a signed zero meets its counterpart (the kernels
// return their left operand there); use halving-doubling, the ring or the tree (each
// element reduced once, then copied) when that matters.
#include "algorithms/allreduce_algos.hpp"

namespace tccl::algo {

Schedule recursiveDoublingAllreduce(int rank, int n, size_t count, size_t segElems) {
  Schedule s;
  s.algorithm = "rd";
  const Fold f = foldOf(n);
  const uint32_t L = static_cast<uint32_t>(f.log2p);
  const uint32_t fs = f.rem > 0 ? 1 : 0;
  s.phases.push_back({"fold-in", 0, fs});
  s.phases.push_back({"exchange", fs, L});
  s.phases.push_back({"fold-out", fs + L, fs});
  if (n <= 1 || count == 0) return s;

  const Range all{0, count};
  const size_t segs = segmentCount(count, segElems);
  // Every receive reduces into Output; `buf` is a send's source or a receive's operand.
  auto emit = [&](OpType type, int peer, uint32_t step, size_t k, BufferId buf, int32_t dep) {
    const Range r = segmentRange(all, segElems, k);
    return type == OpType::Send
               ? addSend(s, peer, step, r, buf, dep)
               : addRecv(s, peer, step, r, RecvAction::Reduce, buf, BufferId::Output, dep);
  };

  const int v = foldVirtualRank(rank, f);
  if (v < 0) {
    for (size_t k = 0; k < segs; ++k) emit(OpType::Send, rank - 1, 0, k, BufferId::Input, -1);
    for (size_t k = 0; k < segs; ++k) {
      const int32_t i = emit(OpType::Recv, rank - 1, fs + L, k, BufferId::Output, -1);
      s.ops[static_cast<size_t>(i)].action = RecvAction::Copy;
    }
    collectPeers(s);
    return s;
  }
  const bool folds = rank < 2 * f.rem;

  // last[k]: the op that last wrote segment k of the partial (-1: still the input).
  std::vector<int32_t> last(segs, -1);
  BufferId partial = BufferId::Input;
  if (folds) {
    for (size_t k = 0; k < segs; ++k) {
      last[k] = emit(OpType::Recv, rank + 1, 0, k, BufferId::Input, -1);
    }
    partial = BufferId::Output;
  }
  for (uint32_t round = 0; round < L; ++round) {
    const int peer = foldRealRank(v ^ (1 << round), f);
    for (size_t k = 0; k < segs; ++k) {
      const int32_t sent = emit(OpType::Send, peer, fs + round, k, partial, last[k]);
      last[k] = emit(OpType::Recv, peer, fs + round, k, partial, sent);
      s.ops[static_cast<size_t>(last[k])].finalize = round + 1 == L;
    }
    partial = BufferId::Output;
  }
  if (folds) {
    for (size_t k = 0; k < segs; ++k) {
      emit(OpType::Send, rank + 1, fs + L, k, BufferId::Output, last[k]);
    }
  }
  collectPeers(s);
  return s;
}

uint64_t rdBytesSent(size_t count, size_t elemSize, int n, int r) {
  if (n <= 1 || count == 0) return 0;
  const Fold f = foldOf(n);
  const uint64_t all = uint64_t{count} * elemSize;
  const int v = foldVirtualRank(r, f);
  if (v < 0) return all;
  return all * static_cast<uint64_t>(f.log2p + (r < 2 * f.rem ? 1 : 0));
}

int rdSteps(int n) {
  if (n <= 1) return 0;
  const Fold f = foldOf(n);
  if (f.rem == 0) return f.log2p;
  // A rank's result after round k is ready one hop after the later of its own and its
  // partner's round k-1 results, so a folded rank's extra hop reaches virtual rank v
  // plus one hop per bit in which they differ; the last arrival is 1 + L (at the
  // complement of virtual rank 0), plus the fold-out when some folded rank's
  // complement is folded too (rem > p/2), where the fold-out starts at 1 + L.
  return f.log2p + 1 + (2 * f.rem > f.p ? 1 : 0);
}

double rdMaxBytesFactor(int n) {
  if (n <= 1) return 0;
  const Fold f = foldOf(n);
  return f.log2p + (f.rem > 0 ? 1.0 : 0.0);
}

}  // namespace tccl::algo
