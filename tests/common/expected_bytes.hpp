// The payload bytes a rank of every all-reduce algorithm sends (and, for the ring,
// receives), written from docs/algorithms.md for the tests, independently of
// src/algorithms (whose chunking helpers and closed forms the schedules themselves use: an
// expectation computed with them would agree with a schedule that got them wrong). Nothing
// here includes a library header.
//
// The vector of `count` elements is cut into n chunks, the first count % n of them one
// element longer. In the ring's reduce-scatter rank r sends every chunk but (r+1) mod n,
// which it ends up owning, and receives every chunk but r, its first send; in the
// all-gather it sends every chunk but (r+2) mod n and receives every chunk but
// (r+1) mod n, which it already holds. Naive sends the whole vector to each other rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace tccl::testing {

inline uint64_t chunkElems(size_t count, int n, int c) {
  const size_t parts = static_cast<size_t>(n);
  return count / parts + (static_cast<size_t>(c) < count % parts ? 1 : 0);
}

inline uint64_t ringSentBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  return (2 * uint64_t{count} - chunkElems(count, n, (r + 1) % n) -
          chunkElems(count, n, (r + 2) % n)) *
         elem;
}

inline uint64_t ringRecvBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  return (2 * uint64_t{count} - chunkElems(count, n, r) - chunkElems(count, n, (r + 1) % n)) * elem;
}

inline uint64_t naiveSentBytes(size_t count, size_t elem, int n) {
  return n <= 1 ? 0 : static_cast<uint64_t>(n - 1) * count * elem;
}

// ---- double binary tree (docs/algorithms.md, "The trees") ---------------------------------
// Tree 0 over positions 0..n-1: position 0 is the root, with one child, the largest power
// of two below n; an even position x > 0 with lowest set bit b has children x - b/2 and
// x + b/2, the latter replaced, when it is >= n, by x + (the largest power of two below
// n - x) if there is one. Odd positions are leaves.
inline int largestPowerOfTwoBelow(int m) {  // 0 when there is none (m <= 1)
  int p = 0;
  for (int q = 1; q < m; q *= 2) p = q;
  return p;
}

inline int treeChildren(int n, int x) {
  if (n <= 1) return 0;
  if (x == 0) return 1;
  if (x % 2 == 1) return 0;
  const int b = x & -x;
  int kids = 1;  // x - b/2
  if (x + b / 2 < n || largestPowerOfTwoBelow(n - x) > 0) ++kids;
  return kids;
}

// Tree 1 places rank r at position n-1-r (even n) or (r-1) mod n (odd n). Each tree
// carries half of the vector (the first half one element longer); a rank sends its half
// up once unless it is the root, and down once per child.
inline uint64_t treeSentBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  const int pos[2] = {r, n % 2 == 0 ? n - 1 - r : (r - 1 + n) % n};
  uint64_t sent = 0;
  for (int t = 0; t < 2; ++t) {
    const uint64_t half = chunkElems(count, 2, t);
    sent += half * static_cast<uint64_t>((pos[t] != 0 ? 1 : 0) + treeChildren(n, pos[t]));
  }
  return sent * elem;
}

// ---- halving-doubling and recursive doubling ----------------------------------------------
// p the largest power of two <= n, rem = n - p. Ranks below 2 rem fold: the odd one sends
// its input (V) to the even one below it and takes no other part; the even one runs the
// core as virtual rank r/2 and sends the result back (V more). Ranks >= 2 rem are virtual
// rank r - rem.
struct FoldedRank {
  int p = 1, levels = 0;
  int virt = -1;  // -1: an odd fold rank
  bool evenFold = false;
};

inline FoldedRank fold(int n, int r) {
  FoldedRank f;
  while (f.p * 2 <= n) {
    f.p *= 2;
    ++f.levels;
  }
  const int rem = n - f.p;
  if (r < 2 * rem) {
    f.evenFold = r % 2 == 0;
    f.virt = f.evenFold ? r / 2 : -1;
  } else {
    f.virt = r - rem;
  }
  return f;
}

// The core of halving-doubling: rank v sends, over the rounds, the aligned groups of 2, 4,
// ..., p blocks holding block v (blocks: the vector cut in p chunks).
inline uint64_t hdSentBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  const FoldedRank f = fold(n, r);
  const uint64_t v = uint64_t{count};
  if (f.virt < 0) return v * elem;
  uint64_t sent = f.evenFold ? v : 0;
  for (int g = 2; g <= f.p; g *= 2) {
    const int first = f.virt / g * g;
    for (int b = first; b < first + g; ++b) sent += chunkElems(count, f.p, b);
  }
  return sent * elem;
}

// Recursive doubling: the whole vector once per round (log2 p rounds), plus the result
// back on an even fold rank; an odd fold rank sends only its input.
inline uint64_t rdSentBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  const FoldedRank f = fold(n, r);
  const uint64_t v = uint64_t{count} * elem;
  if (f.virt < 0) return v;
  return v * static_cast<uint64_t>(f.levels + (f.evenFold ? 1 : 0));
}

// ---- hierarchical (docs/algorithms.md, "Hierarchical all-reduce") -------------------------
// hostKey[r]: any value, equal for ranks on one host. Hosts are numbered by their lowest
// rank; a rank's local index is its place among its host's ranks in rank order.
struct HierSent {
  uint64_t intra = 0, inter = 0;
  uint64_t total() const { return intra + inter; }
};

inline HierSent hierSentBytes(const std::vector<int>& hostKey, size_t count, size_t elem, int r) {
  std::map<int, int> hostNumber;  // key -> host index, in order of the hosts' lowest ranks
  std::vector<std::vector<int>> members;
  for (size_t q = 0; q < hostKey.size(); ++q) {
    auto [it, fresh] = hostNumber.emplace(hostKey[q], static_cast<int>(members.size()));
    if (fresh) members.emplace_back();
    members[static_cast<size_t>(it->second)].push_back(static_cast<int>(q));
  }
  const int hosts = static_cast<int>(members.size());
  const int h = hostNumber.at(hostKey[static_cast<size_t>(r)]);
  const std::vector<int>& mine = members[static_cast<size_t>(h)];
  const int local = static_cast<int>(std::find(mine.begin(), mine.end(), r) - mine.begin());
  const int size = static_cast<int>(mine.size());
  const bool uniform = std::all_of(members.begin(), members.end(), [&](const std::vector<int>& m) {
    return m.size() == mine.size();
  });
  HierSent out;
  if (uniform) {
    // A ring within the host over the whole vector, then a ring across hosts over shard
    // (local + 1) mod L of it.
    out.intra = ringSentBytes(count, elem, size, local);
    out.inter = ringSentBytes(chunkElems(count, size, (local + 1) % size), elem, hosts, h);
    return out;
  }
  // Leaders: V down the chain (if the host has company) and a ring among the leaders;
  // the others V up the chain and, unless they are its tail, V down.
  const uint64_t v = uint64_t{count} * elem;
  if (local == 0) {
    out.intra = size > 1 ? v : 0;
    out.inter = ringSentBytes(count, elem, hosts, h);
  } else {
    out.intra = v + (local < size - 1 ? v : 0);
  }
  return out;
}

}  // namespace tccl::testing
