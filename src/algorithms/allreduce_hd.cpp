// Halving-doubling all-reduce (Rabenseifner): a reduce-scatter by recursive halving
// followed by an all-gather by recursive doubling, over p = 2^L ranks.
//
// Fold (n not a power of two, rem = n - p): odd rank 2i+1 < 2 rem sends its input to
// rank 2i, which reduces it into Output (Input op received) and runs the core as
// virtual rank i; ranks >= 2 rem are virtual rank r - rem. At the end rank 2i sends
// the result back (one step each way, V bytes each).
// Core, with blocks b_i = chunkRange(count, p, i) and G_d(v) the aligned group of d
// blocks holding block v:
//   reduce-scatter, rounds k = 0..L-1, distance d = p / 2^(k+1), partner v ^ d:
//     send G_d(v ^ d) (the half the partner keeps), receive G_d(v) and reduce it into
//     Output; after round L-1 rank v holds block v fully reduced (avg divides there).
//   all-gather, rounds k = 0..L-1, distance d = 2^k, partner v ^ d:
//     send G_d(v), receive G_d(v ^ d) and copy it into Output.
// Steps: 2L + 2 [rem > 0]. Bytes sent by core rank v: sum_{j=1..L} |G_{2^j}(v)| =
// 2(p-1)/p x V when p divides count; + V for an even fold rank; an odd fold rank sends
// V (hdBytesSent). Every element is reduced on exactly one rank and copied to the
// others, so all ranks get bitwise the same result for every op and dtype.
// Segments: every range is cut in segments of S elements from its own start; empty
// groups (count < p) have no segments, so no message on either side.
//
// Dependencies (one per op; receives from one peer complete in order):
//   - a reduce-scatter segment (send or receive) waits for the receive segment of the
//     round before that holds its last element (the one round that wrote its range);
//   - the all-gather's receives form one chain of completions: each round's first
//     receive waits for the previous round's last (Copy lands at once; only completion
//     waits), so the completion of any of them implies every earlier final write;
//     an all-gather or fold-out send waits for the latest write covering its range.
// Hazards: within a round the sent and received ranges are disjoint; a copy into
// G_d(v ^ d) happens only after the partner reduced our send of that range, so our
// send has completed.
#include <algorithm>

#include "algorithms/allreduce_algos.hpp"

namespace tccl::algo {

namespace {

// Elements [offset(a), offset(a + d)) of the aligned group of d blocks holding block v.
Range group(size_t count, int p, int v, int d) {
  const int a = (v / d) * d;
  const Range first = chunkRange(count, p, a);
  const size_t end = a + d >= p ? count : chunkRange(count, p, a + d).offset;
  return {first.offset, end - first.offset};
}

// The receives of one round: their range and op index per segment.
struct RoundRecvs {
  Range range;
  std::vector<int32_t> ops;
  // The receive segment holding element x (x in range).
  int32_t at(size_t x, size_t segElems) const { return ops[(x - range.offset) / segElems]; }
};

}  // namespace

Schedule halvingDoublingAllreduce(int rank, int n, size_t count, size_t segElems) {
  Schedule s;
  s.algorithm = "hd";
  const Fold f = foldOf(n);
  const uint32_t L = static_cast<uint32_t>(f.log2p);
  const uint32_t fs = f.rem > 0 ? 1 : 0;
  s.phases.push_back({"fold-in", 0, fs});
  s.phases.push_back({"reduce-scatter", fs, L});
  s.phases.push_back({"all-gather", fs + L, L});
  s.phases.push_back({"fold-out", fs + 2 * L, fs});
  if (n <= 1 || count == 0) return s;

  const Range all{0, count};
  const size_t allSegs = segmentCount(count, segElems);
  auto send = [&](int peer, uint32_t step, Range r, BufferId buf, int32_t dep) {
    return addSend(s, peer, step, r, buf, dep);
  };
  auto recv = [&](int peer, uint32_t step, Range r, RecvAction action, BufferId operand,
                  int32_t dep, bool finalize) {
    return addRecv(s, peer, step, r, action, operand, BufferId::Output, dep, finalize);
  };

  const int v = foldVirtualRank(rank, f);
  if (v < 0) {
    // Odd fold rank: hand the input to rank-1, get the result back.
    for (size_t k = 0; k < allSegs; ++k) {
      send(rank - 1, 0, segmentRange(all, segElems, k), BufferId::Input, -1);
    }
    for (size_t k = 0; k < allSegs; ++k) {
      recv(rank - 1, fs + 2 * L, segmentRange(all, segElems, k), RecvAction::Copy, BufferId::Output,
           -1, false);
    }
    collectPeers(s);
    return s;
  }
  const bool folds = rank < 2 * f.rem;

  // The last writes of the partial result so far (none: it is still the input).
  RoundRecvs prev;
  BufferId partial = BufferId::Input;
  if (folds) {
    prev.range = all;
    for (size_t k = 0; k < allSegs; ++k) {
      prev.ops.push_back(recv(rank + 1, 0, segmentRange(all, segElems, k), RecvAction::Reduce,
                              BufferId::Input, -1, false));
    }
    partial = BufferId::Output;
  }
  auto prevDep = [&](const Range& r) {
    return prev.ops.empty() ? -1 : prev.at(r.offset + r.count - 1, segElems);
  };

  // Reduce-scatter by recursive halving.
  for (uint32_t k = 0; k < L; ++k) {
    const int d = f.p >> (k + 1);
    const int peer = foldRealRank(v ^ d, f);
    const Range out = group(count, f.p, v ^ d, d);
    const Range in = group(count, f.p, v, d);
    for (size_t j = 0; j < segmentCount(out.count, segElems); ++j) {
      const Range r = segmentRange(out, segElems, j);
      send(peer, fs + k, r, partial, prevDep(r));
    }
    RoundRecvs cur;
    cur.range = in;
    for (size_t j = 0; j < segmentCount(in.count, segElems); ++j) {
      const Range r = segmentRange(in, segElems, j);
      cur.ops.push_back(recv(peer, fs + k, r, RecvAction::Reduce, partial, prevDep(r), k + 1 == L));
    }
    prev = std::move(cur);
    partial = BufferId::Output;
  }

  // All-gather by recursive doubling. written[0]: block v (the last halving round);
  // written[j+1]: G_{2^j}(v ^ 2^j), received in doubling round j.
  std::vector<RoundRecvs> written;
  written.push_back(std::move(prev));
  int32_t chainTail = written[0].ops.empty() ? -1 : written[0].ops.back();
  // The latest write (in chain order) to any element of r, which lies in G_d(v).
  auto latestWrite = [&](const Range& r, size_t rounds) -> int32_t {
    const size_t end = r.offset + r.count;
    for (size_t j = rounds + 1; j-- > 0;) {
      const RoundRecvs& w = written[j];
      const size_t lo = std::max(r.offset, w.range.offset);
      const size_t hi = std::min(end, w.range.offset + w.range.count);
      if (lo < hi) return w.at(hi - 1, segElems);
    }
    return -1;
  };
  for (uint32_t k = 0; k < L; ++k) {
    const int d = 1 << k;
    const int peer = foldRealRank(v ^ d, f);
    const Range out = group(count, f.p, v, d);
    const Range in = group(count, f.p, v ^ d, d);
    for (size_t j = 0; j < segmentCount(out.count, segElems); ++j) {
      const Range r = segmentRange(out, segElems, j);
      send(peer, fs + L + k, r, BufferId::Output, latestWrite(r, k));
    }
    RoundRecvs cur;
    cur.range = in;
    for (size_t j = 0; j < segmentCount(in.count, segElems); ++j) {
      cur.ops.push_back(recv(peer, fs + L + k, segmentRange(in, segElems, j), RecvAction::Copy,
                             BufferId::Output, j == 0 ? chainTail : -1, false));
    }
    if (!cur.ops.empty()) chainTail = cur.ops.back();
    written.push_back(std::move(cur));
  }

  if (folds) {
    for (size_t k = 0; k < allSegs; ++k) {
      const Range r = segmentRange(all, segElems, k);
      send(rank + 1, fs + 2 * L, r, BufferId::Output, latestWrite(r, L));
    }
  }
  collectPeers(s);
  return s;
}

uint64_t hdBytesSent(size_t count, size_t elemSize, int n, int r) {
  if (n <= 1 || count == 0) return 0;
  const Fold f = foldOf(n);
  const uint64_t all = uint64_t{count} * elemSize;
  const int v = foldVirtualRank(r, f);
  if (v < 0) return all;
  uint64_t elems = 0;
  for (int d = 2; d <= f.p; d *= 2) elems += group(count, f.p, v, d).count;
  return elems * elemSize + (r < 2 * f.rem ? all : 0);
}

int hdSteps(int n) {
  if (n <= 1) return 0;
  const Fold f = foldOf(n);
  return 2 * f.log2p + (f.rem > 0 ? 2 : 0);
}

double hdMaxBytesFactor(int n) {
  if (n <= 1) return 0;
  const Fold f = foldOf(n);
  return 2.0 * (f.p - 1) / f.p + (f.rem > 0 ? 1.0 : 0.0);
}

}  // namespace tccl::algo
