// The all-reduce algorithms beyond the ring: double binary tree, halving-doubling
// (Rabenseifner), recursive doubling and the hierarchical (host-aware) one, with closed
// forms for the bytes each rank sends and the steps (messages in sequence) each takes.
// The ring and the naive algorithm live in schedule.hpp. docs/algorithms.md derives
// every formula here.
//
// Notation: n ranks, count elements, V = count * elemSize bytes per rank,
// p = the largest power of two <= n, L = log2 p, rem = n - p.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "tccl/types.hpp"

namespace tccl::algo {

// ---- the power-of-two fold (halving-doubling and recursive doubling) ----------------
//
// Ranks 0 .. 2*rem-1 pair up as (2i, 2i+1): the odd rank sends its whole input to the
// even one, which reduces it into its own and stands for both in the core algorithm
// among p ranks; at the end the even rank sends the result back. The core's virtual
// rank of real rank r is r/2 for even r < 2*rem and r - rem for r >= 2*rem.
struct Fold {
  int p = 1;  // largest power of two <= n
  int log2p = 0;
  int rem = 0;  // n - p
};

inline Fold foldOf(int n) {
  Fold f;
  while (f.p * 2 <= n) {
    f.p *= 2;
    ++f.log2p;
  }
  f.rem = n > 0 ? n - f.p : 0;
  return f;
}
// -1 for an odd rank below 2*rem (it sits the core out).
inline int foldVirtualRank(int r, const Fold& f) {
  if (r < 2 * f.rem) return r % 2 == 0 ? r / 2 : -1;
  return r - f.rem;
}
inline int foldRealRank(int v, const Fold& f) { return v < f.rem ? 2 * v : v + f.rem; }

// ---- the binary trees of the double binary tree --------------------------------------
//
// An in-order binary tree over positions 0..n-1: position 0 is the root and has one
// child, the largest power of two below n; below it a position x with lowest set bit b
// has children x - b/2 and x + b/2 (when b >= 2), where a missing x + b/2 (>= n) is
// replaced by x + (the largest power of two below n - x) when that is < n. Odd
// positions are exactly the leaves, every even position has at least one child, and
// the depth is ceil(log2 n).
//
// Tree 0 puts rank r at position r. Tree 1 puts rank r at position n-1-r for even n
// (so every rank is a leaf in exactly one tree) and at position r-1 mod n for odd n
// (every rank but 0 is a leaf in exactly one tree; rank 0 is the root of tree 0 and an
// inner node of tree 1).
namespace btree {
int parent(int pos, int n);  // -1 for the root
// The children of `pos` in ascending order, written to out[0..k); returns k (0..2).
int children(int pos, int n, int out[2]);
int depthOf(int pos, int n);  // 0 for the root
int depth(int n);             // the deepest node's depth: ceil(log2 n), 0 for n <= 1
int position(int tree, int rank, int n);
int rankAt(int tree, int pos, int n);
}  // namespace btree

// ---- schedules -----------------------------------------------------------------------

// Double binary tree: the vector is cut in two halves, half t reduced up tree t to its
// root and broadcast back down, both pipelined in segments. Input and Output may be
// the same buffer; no scratch.
Schedule treeAllreduce(int rank, int n, size_t count, size_t segElems);

// Halving-doubling (Rabenseifner): fold to p ranks, reduce-scatter by recursive
// halving, all-gather by recursive doubling, unfold. Input and Output may be the same
// buffer; no scratch.
Schedule halvingDoublingAllreduce(int rank, int n, size_t count, size_t segElems);

// Recursive doubling: fold to p ranks, L rounds exchanging the whole vector with the
// partner at distance 1, 2, 4, ..., unfold. Input and Output may be the same buffer;
// no scratch.
Schedule recursiveDoublingAllreduce(int rank, int n, size_t count, size_t segElems);

// ---- closed forms: payload bytes rank r sends ----------------------------------------
//
// Tree: halves h0 = |chunkRange(count, 2, 0)|, h1 = |chunkRange(count, 2, 1)|; in tree
// t a rank sends its half up once unless it is the root, and down once per child:
//   treeBytesSent(r) = sum_t h_t * ([r is not root of t] + children_t(r)) * elemSize
// which is at most 2V (an inner node with two children in one tree, a leaf in the
// other), V for n = 2 and 0 for n = 1.
uint64_t treeBytesSent(size_t count, size_t elemSize, int n, int r);
// Halving-doubling: with blocks b_i = chunkRange(count, p, i) and G_d(v) the aligned
// group of d blocks holding block v, core rank v sends sum_{j=1..L} |G_{2^j}(v)|
// elements (= 2(p-1)/p x count when p divides count); an even fold rank adds V (the
// result it sends back), an odd fold rank sends only its input, V.
uint64_t hdBytesSent(size_t count, size_t elemSize, int n, int r);
// Recursive doubling: L x V for a core rank, (L+1) x V for an even fold rank, V for an
// odd fold rank.
uint64_t rdBytesSent(size_t count, size_t elemSize, int n, int r);

// ---- closed forms: steps (the longest chain of messages, one segment per range) -------
//   tree: 2 ceil(log2 n)                     (up the deepest path, then down it)
//   hd  : 2L + 2 [rem > 0]                   (fold in, L halving, L doubling, fold out)
//   rd  : L + [rem > 0] + [2 rem > p]        (phases: fold in, L rounds, fold out; a
//         core rank that did not fold sends its round-0 message at once, so the fold-in
//         hop overlaps the exchanges unless rem > p/2)
// All 0 for n = 1. hd: the sum of the schedule's phase lengths; tree: each tree's.
int treeSteps(int n);
int hdSteps(int n);
int rdSteps(int n);

// ---- the cost model's bytes: the busiest rank's bytes as a multiple of V -------------
//   tree: 1 (n = 2), 1.5 (n = 3), 2 (n >= 4)
//   hd  : 2(p-1)/p + [rem > 0]
//   rd  : L + [rem > 0]
// (exact when 2, resp. p, divides count; 0 for n = 1.)
double treeMaxBytesFactor(int n);
double hdMaxBytesFactor(int n);
double rdMaxBytesFactor(int n);

// ---- hosts and the hierarchical all-reduce -------------------------------------------
//
// Which ranks share a host. Hosts are numbered in the order of their lowest rank (rank 0
// is on host 0); a host's ranks are listed ascending, and a rank's local index is its
// position there (local index 0, the host's lowest rank, is its leader).
struct HostLayout {
  std::vector<int> hostOf;                // rank -> host
  std::vector<int> localOf;               // rank -> local index
  std::vector<std::vector<int>> members;  // host -> its ranks, ascending

  // Ranks with equal keys share a host (keys[r] is rank r's key).
  static HostLayout fromKeys(const std::vector<std::string>& keys);
  // Hosts of sizes[0], sizes[1], ... consecutive ranks.
  static HostLayout contiguous(const std::vector<int>& sizes);
  // Every rank on a host of its own.
  static HostLayout separate(int n);

  int worldSize() const { return static_cast<int>(hostOf.size()); }
  int hosts() const { return static_cast<int>(members.size()); }
  int localSize(int rank) const;
  int maxLocal() const;
  // Every host has the same number of ranks.
  bool uniform() const;
  // "4 hosts x 2 ranks" or "3 hosts (3+1+2 ranks)".
  std::string describe() const;
};

// Hierarchical all-reduce. With H hosts and L ranks on every host (uniform):
//   1. intra-host reduce-scatter: a ring among the host's L ranks; local rank l ends up
//      owning shard (l+1) mod L of the vector (shards: chunkRange(count, L, j)), reduced
//      over its host;
//   2. inter-host all-reduce of that shard: a ring reduce-scatter + all-gather among the
//      H ranks with local index l, one per host (sub-chunks: chunkRange(|shard|, H, c));
//   3. intra-host all-gather of the shards: a ring among the host's L ranks.
// When hosts have different numbers of ranks, the leader variant instead:
//   1. reduces within each host down a chain to its leader (local L_h-1 -> ... -> 0),
//   2. runs the ring all-reduce of the whole vector among the H leaders,
//   3. broadcasts within each host down the chain from the leader.
// Both pipeline segment by segment across the phases (a piece moves on as soon as its
// previous phase has produced it). Input and Output may be the same buffer; no scratch.
// hosts.worldSize() is the world size; rank must be in it.
Schedule hierarchicalAllreduce(int rank, const HostLayout& hosts, size_t count, size_t segElems);

// Payload bytes rank r sends to ranks on its own host (intra) and on others (inter):
//   uniform: intra = ringBytesSent(count, s, L, l)           (0 for L = 1)
//            inter = ringBytesSent(|shard (l+1) mod L|, s, H, h) (0 for H = 1)
//   leaders: intra = V x ([l > 0] + [l < L_h - 1])           (chain up, chain down)
//            inter = ringBytesSent(count, s, H, h) on a leader, 0 elsewhere
// with h = r's host, l = its local index. Per host the inter bytes sum to about
// 2(H-1)/H x V (exactly when H x L divides count), against the flat ring's
// 2(N-1)/N x V leaving a host whose ranks are consecutive.
struct HostBytes {
  uint64_t intra = 0;
  uint64_t inter = 0;
  uint64_t total() const { return intra + inter; }
};
HostBytes hierBytesSent(const HostLayout& hosts, size_t count, size_t elemSize, int r);
// The phases' steps: 2(L-1) + 2(H-1) uniform; 2(Lmax-1) + 2(H-1) with leaders. The
// longest chain of messages equals it when uniform and never exceeds it.
int hierSteps(const HostLayout& hosts);
// True when the layout makes hierarchicalAllreduce use the leader variant.
bool hierUsesLeaders(const HostLayout& hosts);

// The most payload bytes any one host sends to other hosts when every rank runs
// algorithm `a` (any of the menu) on `count` elements: from the closed forms for the
// ring (a rank's sends all go to its successor), naive (L_h x (N - L_h) x V) and hier,
// and by summing the schedules for tree, hd and rd.
uint64_t hostEgressBytes(Algorithm a, const HostLayout& hosts, size_t count, size_t elemSize);

}  // namespace tccl::algo
