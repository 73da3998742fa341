#include "algorithms/collectives.hpp"

#include <algorithm>
#include <set>

namespace tccl::algo {
namespace {

int log2Floor(int x) {
  int k = 0;
  while ((2 << k) <= x) ++k;
  return k;
}

int32_t pushOp(Schedule& s, const Op& op) {
  s.ops.push_back(op);
  return static_cast<int32_t>(s.ops.size() - 1);
}

// ceil(log2 n) for n >= 1.
uint32_t rounds(int n) {
  uint32_t k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Ring pass shared by reduce-scatter and all-gather (even and uneven): N-1 steps, each
// forwarding the block received in the previous step, segment by segment.
//   blockOf(b): block b's logical range; sendBlock(s), recvBlock(s): block indices;
//   sendFrom(s): source buffer; recv(s, range): the receive op for that step.
// The block a rank sends at step s+1 is the one it received at step s, so segment k of
// that send waits for segment k of that receive.
template <typename BlockOf, typename SendBlock, typename RecvBlock, typename SendFrom,
          typename MakeRecv>
void ringPass(Schedule& s, int rank, int n, size_t segElems, BlockOf blockOf, SendBlock sendBlock,
              RecvBlock recvBlock, SendFrom sendFrom, MakeRecv makeRecv) {
  const int next = ring::next(rank, n);
  const int prev = ring::prev(rank, n);
  std::vector<int32_t> lastRecv;
  for (int st = 0; st < n - 1; ++st) {
    const Range sb = blockOf(sendBlock(st));
    const Range rb = blockOf(recvBlock(st));
    const size_t sendSegs = segmentCount(sb.count, segElems);
    const size_t recvSegs = segmentCount(rb.count, segElems);
    std::vector<int32_t> thisRecv(recvSegs, -1);
    for (size_t k = 0; k < std::max(sendSegs, recvSegs); ++k) {
      if (k < sendSegs) {
        addSend(s, next, static_cast<uint32_t>(st), segmentRange(sb, segElems, k), sendFrom(st),
                k < lastRecv.size() ? lastRecv[k] : -1);
      }
      if (k < recvSegs) thisRecv[k] = pushOp(s, makeRecv(st, prev, segmentRange(rb, segElems, k)));
    }
    lastRecv = std::move(thisRecv);
  }
}

// The ring reduce-scatter's receive at step st (the last one completes block r).
Op rsRecv(int n, int st, int prev, Range r) {
  Op op;
  op.type = OpType::Recv;
  op.peer = prev;
  op.step = static_cast<uint32_t>(st);
  op.range = r;
  op.action = RecvAction::Reduce;
  op.buffer = BufferId::Input;
  const bool last = st == n - 2;  // the block received last is block r: complete
  op.dst = last ? BufferId::Output : BufferId::Scratch;
  op.finalize = last;
  return op;
}

Op agRecv(int st, int prev, Range r) {
  Op op;
  op.type = OpType::Recv;
  op.peer = prev;
  op.step = static_cast<uint32_t>(st);
  op.range = r;
  op.dst = BufferId::Output;
  return op;
}

// Both ring passes over blocks blockOf(0..n-1); reduce: reduce-scatter, else all-gather.
template <typename BlockOf>
Schedule ringOf(int rank, int n, size_t segElems, BlockOf blockOf, bool reduce, size_t scratch) {
  Schedule s;
  s.algorithm = "ring";
  const uint32_t steps = n > 1 ? static_cast<uint32_t>(n - 1) : 0;
  s.phases.push_back({reduce ? "reduce-scatter" : "all-gather", 0, steps});
  if (n <= 1) return s;
  if (reduce) {
    ringPass(
        s, rank, n, segElems, blockOf, [&](int st) { return mod(int64_t{rank} - st - 1, n); },
        [&](int st) { return mod(int64_t{rank} - st - 2, n); },
        [](int st) { return st == 0 ? BufferId::Input : BufferId::Scratch; },
        [&](int st, int prev, Range r) { return rsRecv(n, st, prev, r); });
  } else {
    ringPass(
        s, rank, n, segElems, blockOf, [&](int st) { return mod(int64_t{rank} - st, n); },
        [&](int st) { return mod(int64_t{rank} - st - 1, n); },
        [](int st) { return st == 0 ? BufferId::Input : BufferId::Output; }, agRecv);
  }
  if (!s.ops.empty() && reduce) s.scratchElems = scratch;
  collectPeers(s);
  return s;
}

}  // namespace

Schedule ringReduceScatter(int rank, int n, size_t c, size_t segElems) {
  auto blockOf = [c](int b) { return Range{static_cast<size_t>(b) * c, c}; };
  return ringOf(rank, n, segElems, blockOf, /*reduce=*/true, static_cast<size_t>(n) * c);
}

Schedule ringAllGather(int rank, int n, size_t c, size_t segElems) {
  auto blockOf = [c](int b) { return Range{static_cast<size_t>(b) * c, c}; };
  return ringOf(rank, n, segElems, blockOf, /*reduce=*/false, 0);
}

Schedule binomialBroadcast(int rank, int n, int root, size_t c, size_t segElems) {
  Schedule s;
  s.algorithm = "tree";
  s.phases.push_back({"broadcast", 0, rounds(n)});
  if (n <= 1 || c == 0) return s;
  const int v = mod(int64_t{rank} - root, n);
  auto real = [&](int rel) { return mod(int64_t{rel} + root, n); };
  int parent = -1;
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      parent = v - mask;
      break;
    }
    mask <<= 1;
  }
  const uint32_t parentStep = parent >= 0 ? static_cast<uint32_t>(log2Floor(mask)) : 0;
  std::vector<int> children;  // largest subtree first
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (v + m < n) children.push_back(v + m);
  }
  const Range all{0, c};
  for (size_t k = 0; k < segmentCount(c, segElems); ++k) {
    const Range seg = segmentRange(all, segElems, k);
    int32_t got = -1;
    if (parent >= 0) got = addRecvCopy(s, real(parent), parentStep, seg, BufferId::Output);
    for (int child : children) {
      const uint32_t step = static_cast<uint32_t>(log2Floor(child - v));
      addSend(s, real(child), step, seg, parent >= 0 ? BufferId::Output : BufferId::Input, got);
    }
  }
  collectPeers(s);
  return s;
}

Schedule chainBroadcast(int rank, int n, int root, size_t c, size_t segElems) {
  Schedule s;
  s.algorithm = "chain";
  s.phases.push_back({"broadcast", 0, n > 1 ? static_cast<uint32_t>(n - 1) : 0u});
  if (n <= 1 || c == 0) return s;
  const int pos = mod(int64_t{rank} - root, n);
  const int prev = mod(int64_t{rank} - 1, n);
  const int next = mod(int64_t{rank} + 1, n);
  const Range all{0, c};
  for (size_t k = 0; k < segmentCount(c, segElems); ++k) {
    const Range seg = segmentRange(all, segElems, k);
    int32_t got = -1;
    if (pos > 0) got = addRecvCopy(s, prev, static_cast<uint32_t>(pos - 1), seg, BufferId::Output);
    if (pos < n - 1) {
      addSend(s, next, static_cast<uint32_t>(pos), seg,
              pos == 0 ? BufferId::Input : BufferId::Output, got);
    }
  }
  collectPeers(s);
  return s;
}

Schedule binomialReduce(int rank, int n, int root, size_t c, size_t segElems) {
  Schedule s;
  s.algorithm = "tree";
  s.phases.push_back({"reduce", 0, rounds(n)});
  if (n <= 1 || c == 0) return s;
  const int v = mod(int64_t{rank} - root, n);
  auto real = [&](int rel) { return mod(int64_t{rel} + root, n); };
  std::vector<int> children;  // smallest subtree first: the order of folding
  int parent = -1;
  int parentMask = 0;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      parent = v - mask;
      parentMask = mask;
      break;
    }
    if (v + mask < n) children.push_back(v + mask);
  }
  const BufferId acc = parent < 0 ? BufferId::Output : BufferId::Scratch;
  if (parent >= 0 && !children.empty()) s.scratchElems = c;
  const Range all{0, c};
  for (size_t k = 0; k < segmentCount(c, segElems); ++k) {
    const Range seg = segmentRange(all, segElems, k);
    int32_t prevRecv = -1;
    for (size_t j = 0; j < children.size(); ++j) {
      Op op;
      op.type = OpType::Recv;
      op.peer = real(children[j]);
      op.step = static_cast<uint32_t>(log2Floor(children[j] - v));
      op.range = seg;
      op.action = RecvAction::Reduce;
      op.buffer = j == 0 ? BufferId::Input : acc;
      op.dst = acc;
      op.dependsOn = prevRecv;
      op.finalize = parent < 0 && j + 1 == children.size();
      prevRecv = pushOp(s, op);
    }
    if (parent >= 0) {
      addSend(s, real(parent), static_cast<uint32_t>(log2Floor(parentMask)), seg,
              children.empty() ? BufferId::Input : acc, prevRecv);
    }
  }
  collectPeers(s);
  return s;
}

Schedule disseminationBarrier(int rank, int n) {
  Schedule s;
  s.algorithm = "dissemination";
  const uint32_t r = rounds(n);
  s.phases.push_back({"barrier", 0, r});
  if (n <= 1) return s;
  int32_t prevRecv = -1;
  for (uint32_t k = 0; k < r; ++k) {
    const int dist = 1 << k;
    addSend(s, mod(int64_t{rank} + dist, n), k, Range{0, 0}, BufferId::Input, prevRecv);
    prevRecv = addRecvCopy(s, mod(int64_t{rank} - dist, n), k, Range{0, 0}, BufferId::Output);
  }
  collectPeers(s);
  return s;
}

Schedule pairwiseAllToAll(int rank, int n, size_t c, size_t segElems) {
  Schedule s;
  s.algorithm = "pairwise";
  s.phases.push_back({"all-to-all", 0, n > 1 ? 1u : 0u});
  if (n <= 1 || c == 0) return s;
  for (int d = 1; d < n; ++d) {
    const int to = mod(int64_t{rank} + d, n);
    const int from = mod(int64_t{rank} - d, n);
    const Range sb{static_cast<size_t>(to) * c, c};
    const Range rb{static_cast<size_t>(from) * c, c};
    for (size_t k = 0; k < segmentCount(c, segElems); ++k) {
      addSend(s, to, 0, segmentRange(sb, segElems, k), BufferId::Input);
      addRecvCopy(s, from, 0, segmentRange(rb, segElems, k), BufferId::Output);
    }
  }
  collectPeers(s);
  return s;
}

namespace {

// Gather (toRoot) and scatter share one shape: the root talks to every rank directly,
// block p of the root's N-block buffer <-> rank p's single block.
Schedule flatRooted(int rank, int n, int root, size_t c, size_t segElems, bool toRoot) {
  Schedule s;
  s.algorithm = "flat";
  s.phases.push_back({toRoot ? "gather" : "scatter", 0, n > 1 ? 1u : 0u});
  if (n <= 1 || c == 0) return s;
  auto blockOf = [&](int p) { return Range{static_cast<size_t>(p) * c, c}; };
  for (size_t k = 0; k < segmentCount(c, segElems); ++k) {
    if (rank == root) {
      for (int p = 0; p < n; ++p) {
        if (p == root) continue;
        const Range seg = segmentRange(blockOf(p), segElems, k);
        if (toRoot) {
          addRecvCopy(s, p, 0, seg, BufferId::Output);
        } else {
          addSend(s, p, 0, seg, BufferId::Input);
        }
      }
    } else if (toRoot) {
      addSend(s, root, 0, segmentRange(Range{0, c}, segElems, k), BufferId::Input);
    } else {
      addRecvCopy(s, root, 0, segmentRange(blockOf(rank), segElems, k), BufferId::Output);
    }
  }
  collectPeers(s);
  return s;
}

}  // namespace

Schedule flatGather(int rank, int n, int root, size_t c, size_t segElems) {
  return flatRooted(rank, n, root, c, segElems, /*toRoot=*/true);
}

Schedule flatScatter(int rank, int n, int root, size_t c, size_t segElems) {
  return flatRooted(rank, n, root, c, segElems, /*toRoot=*/false);
}

// ---- uneven collectives ------------------------------------------------------------------

namespace {

size_t at(const std::vector<size_t>& v, int i) { return v[static_cast<size_t>(i)]; }

// Prefix sums: block p of a packed vector starts at the sum of the blocks before it.
std::vector<size_t> packedOffsets(const std::vector<size_t>& counts) {
  std::vector<size_t> off(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) off[p] = off[p - 1] + counts[p - 1];
  return off;
}

// Segments k = 0.. of several ranges at once (one per peer, k outer), so that no peer
// waits for another's whole block; emit(i, segment) is called for each.
template <typename Emit>
void interleaveSegments(const std::vector<Range>& ranges, size_t segElems, Emit emit) {
  size_t most = 0;
  for (const Range& r : ranges) most = std::max(most, segmentCount(r.count, segElems));
  for (size_t k = 0; k < most; ++k) {
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (k < segmentCount(ranges[i].count, segElems)) {
        emit(i, segmentRange(ranges[i], segElems, k));
      }
    }
  }
}

}  // namespace

Schedule ringAllGatherV(int rank, int n, const std::vector<size_t>& counts,
                        const std::vector<size_t>& displs, size_t segElems) {
  auto blockOf = [&](int b) { return Range{at(displs, b), at(counts, b)}; };
  return ringOf(rank, n, segElems, blockOf, /*reduce=*/false, 0);
}

Schedule ringReduceScatterV(int rank, int n, const std::vector<size_t>& counts, size_t segElems) {
  const std::vector<size_t> off = packedOffsets(counts);
  auto blockOf = [&](int b) { return Range{at(off, b), at(counts, b)}; };
  const size_t total = n > 0 ? off.back() + counts.back() : 0;
  return ringOf(rank, n, segElems, blockOf, /*reduce=*/true, total);
}

Schedule pairwiseAllToAllV(int rank, int n, const VCounts& v, size_t segElems) {
  Schedule s;
  s.algorithm = "pairwise";
  s.phases.push_back({"all-to-all", 0, n > 1 ? 1u : 0u});
  if (n <= 1) return s;
  // Logical offsets: Input element x is at x + rd[r], Output element y at y + sd[r].
  const size_t inShift = at(v.recvDispls, rank), outShift = at(v.sendDispls, rank);
  std::vector<int> to, from;
  for (int d = 1; d < n; ++d) {
    to.push_back(mod(int64_t{rank} + d, n));
    from.push_back(mod(int64_t{rank} - d, n));
    addCountSend(s, to.back(), 0, at(v.sendCounts, to.back()));
    addCountRecv(s, from.back(), 0, at(v.recvCounts, from.back()));
  }
  std::vector<Range> sends, recvs;
  for (int d = 0; d < n - 1; ++d) {
    const int t = to[static_cast<size_t>(d)], f = from[static_cast<size_t>(d)];
    sends.push_back({at(v.sendDispls, t) + inShift, at(v.sendCounts, t)});
    recvs.push_back({at(v.recvDispls, f) + outShift, at(v.recvCounts, f)});
  }
  // Pair by pair, segment by segment, as the even all-to-all (sends and receives of a
  // pair interleaved: each direction of a connection is its own FIFO).
  for (size_t i = 0; i < sends.size(); ++i) {
    const size_t ks = segmentCount(sends[i].count, segElems);
    const size_t kr = segmentCount(recvs[i].count, segElems);
    for (size_t k = 0; k < std::max(ks, kr); ++k) {
      if (k < ks) addSend(s, to[i], 0, segmentRange(sends[i], segElems, k), BufferId::Input);
      if (k < kr) {
        addRecvCopy(s, from[i], 0, segmentRange(recvs[i], segElems, k), BufferId::Output);
      }
    }
  }
  collectPeers(s);
  return s;
}

namespace {

// Gatherv (toRoot) and scatterv share one shape: the root talks to every rank directly,
// rank p's block of the root's buffer (counts[p] at displs[p]) <-> rank p's `mine`
// elements; each pair's count message goes first, from the side that sends the data.
Schedule flatRootedV(int rank, int n, int root, size_t mine, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs, size_t segElems, bool toRoot) {
  Schedule s;
  s.algorithm = "flat";
  s.phases.push_back({toRoot ? "gather" : "scatter", 0, n > 1 ? 1u : 0u});
  if (n <= 1) return s;
  std::vector<int> peers;
  std::vector<Range> blocks;
  if (rank != root) {
    peers.push_back(root);
    blocks.push_back({0, mine});
    toRoot ? addCountSend(s, root, 0, mine) : addCountRecv(s, root, 0, mine);
  } else {
    for (int p = 0; p < n; ++p) {
      if (p == root) continue;
      peers.push_back(p);
      blocks.push_back({at(displs, p), at(counts, p)});
      toRoot ? addCountRecv(s, p, 0, at(counts, p)) : addCountSend(s, p, 0, at(counts, p));
    }
  }
  const bool sends = toRoot != (rank == root);
  interleaveSegments(blocks, segElems, [&](size_t i, Range seg) {
    if (sends) {
      addSend(s, peers[i], 0, seg, BufferId::Input);
    } else {
      addRecvCopy(s, peers[i], 0, seg, BufferId::Output);
    }
  });
  collectPeers(s);
  return s;
}

}  // namespace

Schedule flatGatherV(int rank, int n, int root, size_t sendCount, const VCounts& v,
                     size_t segElems) {
  return flatRootedV(rank, n, root, sendCount, v.recvCounts, v.recvDispls, segElems, true);
}

Schedule flatScatterV(int rank, int n, int root, size_t recvCount, const VCounts& v,
                      size_t segElems) {
  return flatRootedV(rank, n, root, recvCount, v.sendCounts, v.sendDispls, segElems, false);
}

}  // namespace tccl::algo
