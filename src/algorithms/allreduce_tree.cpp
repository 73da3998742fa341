// Double binary tree all-reduce (the NCCL construction): two binary trees over all
// ranks, each carrying one half of the vector; the trees are complementary, so a rank
// that is a leaf in one (sends its half once) is an inner node in the other, and no
// rank's links carry much more than the others'.
//
// Per tree t, over half H_t = chunkRange(count, 2, t) cut in k = ceil(|H_t| / S)
// segments of S elements:
//   reduce : a rank folds its children's segment j into its own, in ascending child
//            order (Output = (Input op child0) op child1), and sends the result to its
//            parent as soon as that segment is folded; the root finalizes (avg divides).
//   broadcast: the root's final segment j flows down; each rank copies it into
//            Output and forwards it to its children.
// Steps: 2D with D = ceil(log2 n) the tree depth (D up, D down) for one segment;
// with k segments pipelined, 2D + k - 1 segment hops.
// Bytes sent by rank r: sum_t |H_t| x ([r not root of t] + children_t(r)) <= 2V
// (treeBytesSent); an inner node of one tree with two children sends 3/2 V there and
// V/2 as a leaf of the other.
//
// Message order. Each message gets a pipeline time T: segment j leaves depth d for
// the parent at T = j + D - d and reaches depth d from the parent at T = j + D + d - 1.
// Both ends of every link sort their operations by (T, tree, phase, segment), so the
// sender's and the receiver's per-peer queues agree (the wire protocol needs that),
// every dependency points to an earlier T, and neither tree waits behind the other's
// later messages on a shared link.
#include <algorithm>
#include <numeric>
#include <tuple>

#include "algorithms/allreduce_algos.hpp"

namespace tccl::algo {

namespace btree {

namespace {
int lowBit(int x) { return x & -x; }
// The largest power of two strictly below m (m >= 2).
int powerBelow(int m) {
  int q = 1;
  while (q * 2 < m) q *= 2;
  return q;
}
}  // namespace

int parent(int pos, int n) {
  if (pos <= 0) return -1;
  const int b = lowBit(pos);
  if ((pos & (2 * b)) != 0) return pos - b;  // ..11[0] -> ..10[0]
  if (pos + b < n) return pos + b;           // ..01[0] -> ..10[0]
  return pos - b;                            // past the end: ..01[0] -> ..00[0]
}

int children(int pos, int n, int out[2]) {
  if (n <= 1) return 0;
  if (pos == 0) {
    out[0] = powerBelow(n);
    return 1;
  }
  const int b = lowBit(pos);
  if (b < 2) return 0;  // odd positions are the leaves
  int k = 0;
  out[k++] = pos - b / 2;
  if (pos + b / 2 < n) {
    out[k++] = pos + b / 2;
  } else if (n - pos >= 2) {
    out[k++] = pos + powerBelow(n - pos);
  }
  return k;
}

int depthOf(int pos, int n) {
  int d = 0;
  for (int x = pos; x > 0; x = parent(x, n)) ++d;
  return d;
}

int depth(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

int position(int tree, int rank, int n) {
  if (tree == 0 || n <= 1) return rank;
  return n % 2 == 0 ? n - 1 - rank : mod(int64_t{rank} - 1, n);
}

int rankAt(int tree, int pos, int n) {
  if (tree == 0 || n <= 1) return pos;
  return n % 2 == 0 ? n - 1 - pos : mod(int64_t{pos} + 1, n);
}

}  // namespace btree

namespace {

// Units of a half a rank sends in one tree: up once unless root, down once per child.
int treeUnits(int tree, int rank, int n) {
  const int pos = btree::position(tree, rank, n);
  int kids[2];
  return (pos == 0 ? 0 : 1) + btree::children(pos, n, kids);
}

struct Keyed {
  uint64_t t;
  int tree;
  int phase;  // 0 reduce, 1 broadcast
  size_t seg;
  int sub;
  int32_t dep;  // index into the Keyed list, -1 for none
  Op op;
};

}  // namespace

Schedule treeAllreduce(int rank, int n, size_t count, size_t segElems) {
  Schedule s;
  s.algorithm = "tree";
  const uint32_t depth = n > 1 ? static_cast<uint32_t>(btree::depth(n)) : 0;
  s.phases.push_back({"reduce (tree 0)", 0, depth});
  s.phases.push_back({"broadcast (tree 0)", depth, depth});
  s.phases.push_back({"reduce (tree 1)", 2 * depth, depth});
  s.phases.push_back({"broadcast (tree 1)", 3 * depth, depth});
  if (n <= 1 || count == 0) return s;

  std::vector<Keyed> ks;
  auto add = [&](uint64_t t, int tree, int phase, size_t seg, int sub, int32_t dep, const Op& op) {
    ks.push_back({t, tree, phase, seg, sub, dep, op});
    return static_cast<int32_t>(ks.size() - 1);
  };
  const uint64_t dd = depth;
  for (int tree = 0; tree < 2; ++tree) {
    const Range half = chunkRange(count, 2, tree);
    const size_t segs = segmentCount(half.count, segElems);
    if (segs == 0) continue;
    const int pos = btree::position(tree, rank, n);
    const int parentPos = btree::parent(pos, n);
    const int parentRank = parentPos < 0 ? -1 : btree::rankAt(tree, parentPos, n);
    int kidPos[2];
    const int nkids = btree::children(pos, n, kidPos);
    const uint64_t d = static_cast<uint64_t>(btree::depthOf(pos, n));
    const uint32_t base = static_cast<uint32_t>(tree) * 2 * depth;
    for (size_t j = 0; j < segs; ++j) {
      const Range seg = segmentRange(half, segElems, j);
      // Reduce: fold the children in ascending order, then send up.
      int32_t folded = -1;
      for (int c = 0; c < nkids; ++c) {
        Op op;
        op.type = OpType::Recv;
        op.peer = btree::rankAt(tree, kidPos[c], n);
        op.step = base + static_cast<uint32_t>(dd - (d + 1));
        op.range = seg;
        op.action = RecvAction::Reduce;
        op.buffer = c == 0 ? BufferId::Input : BufferId::Output;
        op.dst = BufferId::Output;
        op.finalize = parentPos < 0 && c == nkids - 1;
        folded = add(j + dd - (d + 1), tree, 0, j, c, folded, op);
      }
      if (parentPos >= 0) {
        Op op;
        op.type = OpType::Send;
        op.peer = parentRank;
        op.step = base + static_cast<uint32_t>(dd - d);
        op.range = seg;
        op.buffer = nkids > 0 ? BufferId::Output : BufferId::Input;
        add(j + dd - d, tree, 0, j, 2, folded, op);
      }
      // Broadcast: receive the final segment from the parent (the root has it), then
      // forward it to each child.
      int32_t finalSeg = folded;
      if (parentPos >= 0) {
        Op op;
        op.type = OpType::Recv;
        op.peer = parentRank;
        op.step = base + depth + static_cast<uint32_t>(d - 1);
        op.range = seg;
        op.action = RecvAction::Copy;
        op.dst = BufferId::Output;
        finalSeg = add(j + dd + d - 1, tree, 1, j, 0, -1, op);
      }
      for (int c = 0; c < nkids; ++c) {
        Op op;
        op.type = OpType::Send;
        op.peer = btree::rankAt(tree, kidPos[c], n);
        op.step = base + depth + static_cast<uint32_t>(d);
        op.range = seg;
        op.buffer = BufferId::Output;
        add(j + dd + d, tree, 1, j, 1 + c, finalSeg, op);
      }
    }
  }

  // Sort by pipeline time; remap the dependencies to the sorted positions.
  std::vector<int32_t> order(ks.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Keyed& x = ks[static_cast<size_t>(a)];
    const Keyed& y = ks[static_cast<size_t>(b)];
    return std::tie(x.t, x.tree, x.phase, x.seg, x.sub) <
           std::tie(y.t, y.tree, y.phase, y.seg, y.sub);
  });
  std::vector<int32_t> where(ks.size());
  for (size_t i = 0; i < order.size(); ++i)
    where[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
  s.ops.reserve(ks.size());
  for (int32_t idx : order) {
    const Keyed& k = ks[static_cast<size_t>(idx)];
    Op op = k.op;
    op.dependsOn = k.dep < 0 ? -1 : where[static_cast<size_t>(k.dep)];
    s.ops.push_back(op);
  }
  collectPeers(s);
  return s;
}

uint64_t treeBytesSent(size_t count, size_t elemSize, int n, int r) {
  if (n <= 1 || count == 0) return 0;
  uint64_t elems = 0;
  for (int tree = 0; tree < 2; ++tree) {
    elems += chunkRange(count, 2, tree).count * static_cast<uint64_t>(treeUnits(tree, r, n));
  }
  return elems * elemSize;
}

int treeSteps(int n) { return n <= 1 ? 0 : 2 * btree::depth(n); }

double treeMaxBytesFactor(int n) {
  // Units per rank (see treeUnits): n = 2: 1 + 1; n = 3: at most 2 + 1; n >= 4: an
  // inner node with two children in one tree (1 + 2) that is a leaf in the other (1).
  if (n <= 1) return 0;
  if (n == 2) return 1.0;
  if (n == 3) return 1.5;
  return 2.0;
}

}  // namespace tccl::algo
