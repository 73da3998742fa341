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

// Ring pass shared by reduce-scatter and all-gather: N-1 steps, each forwarding the
// block received in the previous step, segment by segment.
//   sendBlock(s), recvBlock(s): block indices; sendFrom(s): source buffer;
//   recv(s, range): the receive op for that step.
template <typename SendBlock, typename RecvBlock, typename SendFrom, typename MakeRecv>
void ringPass(Schedule& s, int rank, int n, size_t c, size_t segElems, SendBlock sendBlock,
              RecvBlock recvBlock, SendFrom sendFrom, MakeRecv makeRecv) {
  const int next = ring::next(rank, n);
  const int prev = ring::prev(rank, n);
  const size_t segs = segmentCount(c, segElems);
  std::vector<int32_t> lastRecv;
  for (int st = 0; st < n - 1; ++st) {
    const Range sb{static_cast<size_t>(sendBlock(st)) * c, c};
    const Range rb{static_cast<size_t>(recvBlock(st)) * c, c};
    std::vector<int32_t> thisRecv(segs, -1);
    for (size_t k = 0; k < segs; ++k) {
      addSend(s, next, static_cast<uint32_t>(st), segmentRange(sb, segElems, k), sendFrom(st),
              lastRecv.empty() ? -1 : lastRecv[k]);
      thisRecv[k] = pushOp(s, makeRecv(st, prev, segmentRange(rb, segElems, k)));
    }
    lastRecv = std::move(thisRecv);
  }
}

}  // namespace

Schedule ringReduceScatter(int rank, int n, size_t c, size_t segElems) {
  Schedule s;
  s.algorithm = "ring";
  const uint32_t steps = n > 1 ? static_cast<uint32_t>(n - 1) : 0;
  s.phases.push_back({"reduce-scatter", 0, steps});
  if (n <= 1 || c == 0) return s;
  s.scratchElems = static_cast<size_t>(n) * c;
  ringPass(
      s, rank, n, c, segElems, [&](int st) { return mod(int64_t{rank} - st - 1, n); },
      [&](int st) { return mod(int64_t{rank} - st - 2, n); },
      [](int st) { return st == 0 ? BufferId::Input : BufferId::Scratch; },
      [&](int st, int prev, Range r) {
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
      });
  collectPeers(s);
  return s;
}

Schedule ringAllGather(int rank, int n, size_t c, size_t segElems) {
  Schedule s;
  s.algorithm = "ring";
  const uint32_t steps = n > 1 ? static_cast<uint32_t>(n - 1) : 0;
  s.phases.push_back({"all-gather", 0, steps});
  if (n <= 1 || c == 0) return s;
  ringPass(
      s, rank, n, c, segElems, [&](int st) { return mod(int64_t{rank} - st, n); },
      [&](int st) { return mod(int64_t{rank} - st - 1, n); },
      [](int st) { return st == 0 ? BufferId::Input : BufferId::Output; },
      [](int st, int prev, Range r) {
        Op op;
        op.type = OpType::Recv;
        op.peer = prev;
        op.step = static_cast<uint32_t>(st);
        op.range = r;
        op.dst = BufferId::Output;
        return op;
      });
  collectPeers(s);
  return s;
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

}  // namespace tccl::algo
