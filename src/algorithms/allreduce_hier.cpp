// Hierarchical all-reduce: reduce within each host, all-reduce across hosts, spread
// within each host, so that the links between hosts carry about 2(H-1)/H x V per host
// instead of the flat ring's 2(N-1)/N x V.
//
// Notation: H hosts; host h has L_h ranks (L when all hosts have the same number), a
// rank's local index is l, and s is the element size. Hosts and local indices come
// from a HostLayout (allreduce_algos.hpp).
//
// Uniform hosts (every L_h = L). Shards S_j = chunkRange(count, L, j); sub-chunks
// S_j,c = chunkRange(|S_j|, H, c) placed at S_j's offset. Every phase moves the same
// pieces: the segments (at most segElems elements) of each sub-chunk.
//   phase 1, steps [0, L-1): intra-host ring reduce-scatter among the host's ranks:
//     step t sends shard (l-t) mod L to local rank l+1 and receives and reduces shard
//     (l-t-1) mod L from local rank l-1; local rank l then owns shard (l+1) mod L,
//     reduced over its host.
//   phase 2, steps [L-1, L-1 + 2(H-1)): the ring all-reduce of the owned shard among
//     the H ranks with local index l (one per host, in host order), its chunks being
//     the shard's H sub-chunks; avg divides at its last reduce-scatter step.
//   phase 3, steps [L-1 + 2(H-1), 2(L-1) + 2(H-1)): intra-host ring all-gather of the
//     shards.
//   Bytes sent by rank r: intra = ringBytesSent(count, s, L, l) (the two intra phases
//   are one ring all-reduce cut in half), inter = ringBytesSent(|S_(l+1)|, s, H, h).
//   Per host the inter bytes add up to 2(H-1)/H x V when H x L divides count.
//
// Uneven hosts (the leader variant). Chunks C_c = chunkRange(count, H, c); pieces are
// their segments.
//   phase 1, steps [0, Lmax-1): a chain reduce within each host to its leader: local
//     rank l > 0 sends to l-1 at step Lmax-1-l (the chain's tail its Input, the others
//     Input op what came from l+1).
//   phase 2, steps [Lmax-1, Lmax-1 + 2(H-1)): the ring all-reduce of the whole vector
//     among the H leaders (chunks C_c); avg divides at its last reduce-scatter step.
//   phase 3, steps [Lmax-1 + 2(H-1), 2(Lmax-1) + 2(H-1)): a chain broadcast from each
//     leader: local rank l sends to l+1 at step Lmax-1 + 2(H-1) + l.
//   Bytes sent: a leader V within its host (if it has company) plus
//   ringBytesSent(count, s, H, h) to other leaders; every other rank V up the chain,
//   plus V down it unless it is the chain's tail. Per host, again ~2(H-1)/H x V leaves.
//
// Why two variants: the shard variant pairs local rank l of every host in one ring, so
// it needs every host to have the same number of ranks; it spreads the inter-host
// traffic over L concurrent streams and sends 2(L-1)/L x V within a host against the
// chain's 2V. The leader variant works for any layout, with the same inter-host bytes
// per host.
//
// Piece order. Within a shard (or the whole vector) pieces are listed sub-chunk by
// sub-chunk in the order the host's inter-host ring needs them: while reducing, its
// reduce-scatter order h, h-1, ..., h+1; while spreading, the order its results become
// final, h+1, h, ..., h+2. All ranks of a host agree on h, so both ends of every
// intra-host link list the same pieces in the same order, and the first pieces out of
// a phase are the first the next phase needs.
//
// Dependencies. Each piece has at most one latest writer op on this rank. A send of
// the piece waits for it (and reads Output, or Input while nothing has written the
// piece yet); a Reduce receive applies after it (operand: the same rule); a Copy
// receive needs none: it can arrive only after the whole chain that consumed this
// rank's earlier value of the piece (its sends of it included) has completed. So a
// piece moves on to the next phase as soon as its previous phase has produced it.
#include <algorithm>
#include <map>
#include <sstream>

#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"

namespace tccl::algo {

// ---- the host layout -----------------------------------------------------------------

HostLayout HostLayout::fromKeys(const std::vector<std::string>& keys) {
  HostLayout h;
  std::map<std::string, int> index;
  for (size_t r = 0; r < keys.size(); ++r) {
    auto [it, fresh] = index.emplace(keys[r], static_cast<int>(h.members.size()));
    if (fresh) h.members.emplace_back();
    std::vector<int>& m = h.members[static_cast<size_t>(it->second)];
    h.hostOf.push_back(it->second);
    h.localOf.push_back(static_cast<int>(m.size()));
    m.push_back(static_cast<int>(r));
  }
  return h;
}

HostLayout HostLayout::contiguous(const std::vector<int>& sizes) {
  std::vector<std::string> keys;
  for (size_t h = 0; h < sizes.size(); ++h) {
    for (int i = 0; i < sizes[h]; ++i) keys.push_back(std::to_string(h));
  }
  return fromKeys(keys);
}

HostLayout HostLayout::separate(int n) {
  return contiguous(std::vector<int>(static_cast<size_t>(std::max(n, 0)), 1));
}

int HostLayout::localSize(int rank) const {
  return static_cast<int>(members[static_cast<size_t>(hostOf[static_cast<size_t>(rank)])].size());
}

int HostLayout::maxLocal() const {
  size_t m = 0;
  for (const auto& hm : members) m = std::max(m, hm.size());
  return static_cast<int>(m);
}

bool HostLayout::uniform() const {
  for (const auto& hm : members) {
    if (hm.size() != members.front().size()) return false;
  }
  return true;
}

std::string HostLayout::describe() const {
  std::ostringstream os;
  os << hosts() << (hosts() == 1 ? " host" : " hosts");
  if (uniform() && !members.empty()) {
    os << " x " << members.front().size() << (members.front().size() == 1 ? " rank" : " ranks");
  } else {
    os << " (";
    for (size_t h = 0; h < members.size(); ++h) os << (h ? "+" : "") << members[h].size();
    os << " ranks)";
  }
  return os.str();
}

bool hierUsesLeaders(const HostLayout& hosts) { return !hosts.uniform(); }

// ---- the schedule ----------------------------------------------------------------------

namespace {

// The pieces of a vector cut in `shards` shards of `subs` sub-chunks each, segmented.
class Pieces {
 public:
  Pieces(size_t count, int shards, int subs, size_t segElems) : subs_(subs), seg_(segElems) {
    for (int j = 0; j < shards; ++j) {
      const Range shard = chunkRange(count, shards, j);
      for (int c = 0; c < subs; ++c) {
        const Range sub = chunkRange(shard.count, subs, c);
        ranges_.push_back({shard.offset + sub.offset, sub.count});
        first_.push_back(total_);
        total_ += segmentCount(sub.count, segElems);
      }
    }
  }
  size_t total() const { return total_; }
  // The ids of shard j's pieces, sub-chunks in the given order.
  std::vector<size_t> of(int j, const std::vector<int>& subOrder) const {
    std::vector<size_t> ids;
    for (int c : subOrder) {
      const size_t idx = static_cast<size_t>(j * subs_ + c);
      const size_t n = segmentCount(ranges_[idx].count, seg_);
      for (size_t k = 0; k < n; ++k) ids.push_back(first_[idx] + k);
    }
    return ids;
  }
  // The ids of sub-chunk c of shard j.
  std::vector<size_t> sub(int j, int c) const { return of(j, {c}); }
  Range range(size_t id) const {
    // The sub-chunk holding id: the last first_ <= id.
    const size_t idx =
        static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), id) - first_.begin()) -
        1;
    // An empty sub-chunk shares its first_ with the next one, so this is never one.
    return segmentRange(ranges_[idx], seg_, id - first_[idx]);
  }

 private:
  int subs_;
  size_t seg_;
  std::vector<Range> ranges_;
  std::vector<size_t> first_;
  size_t total_ = 0;
};

// Builds one rank's ops, tracking each piece's latest writer.
class Builder {
 public:
  Builder(Schedule& s, const Pieces& p) : s_(s), p_(p), writer_(p.total(), -1) {}

  void send(int peer, uint32_t step, size_t id) {
    const int32_t w = writer_[id];
    addSend(s_, peer, step, p_.range(id), w < 0 ? BufferId::Input : BufferId::Output, w);
  }
  // Output[piece] = (Output or Input)[piece] op payload, after the piece's writer.
  void recvReduce(int peer, uint32_t step, size_t id, bool finalize) {
    const int32_t w = writer_[id];
    writer_[id] =
        addRecv(s_, peer, step, p_.range(id), RecvAction::Reduce,
                w < 0 ? BufferId::Input : BufferId::Output, BufferId::Output, w, finalize);
  }
  void recvCopy(int peer, uint32_t step, size_t id) {
    writer_[id] = addRecvCopy(s_, peer, step, p_.range(id), BufferId::Output);
  }

  // Ring reduce-scatter among m members (this one at index me, peers next/prev) over
  // chunks[i] (piece ids), steps step0 .. step0+m-2: step t sends chunk (me-t) and
  // reduces chunk (me-t-1). Sends and receives are interleaved piece by piece.
  void ringReduceScatter(int me, int m, int next, int prev, uint32_t step0,
                         const std::vector<std::vector<size_t>>& chunks, bool finalizeLast) {
    for (int t = 0; t + 1 < m; ++t) {
      const auto& out = chunks[static_cast<size_t>(ring::rsSendChunk(me, m, t))];
      const auto& in = chunks[static_cast<size_t>(ring::rsRecvChunk(me, m, t))];
      const uint32_t step = step0 + static_cast<uint32_t>(t);
      for (size_t k = 0; k < std::max(out.size(), in.size()); ++k) {
        if (k < out.size()) send(next, step, out[k]);
        if (k < in.size()) recvReduce(prev, step, in[k], finalizeLast && t + 2 == m);
      }
    }
  }
  // Ring all-gather: step t sends chunk (me+1-t), copies chunk (me-t).
  void ringAllGather(int me, int m, int next, int prev, uint32_t step0,
                     const std::vector<std::vector<size_t>>& chunks) {
    for (int t = 0; t + 1 < m; ++t) {
      const auto& out = chunks[static_cast<size_t>(ring::agSendChunk(me, m, t))];
      const auto& in = chunks[static_cast<size_t>(ring::agRecvChunk(me, m, t))];
      const uint32_t step = step0 + static_cast<uint32_t>(t);
      for (size_t k = 0; k < std::max(out.size(), in.size()); ++k) {
        if (k < out.size()) send(next, step, out[k]);
        if (k < in.size()) recvCopy(prev, step, in[k]);
      }
    }
  }

 private:
  Schedule& s_;
  const Pieces& p_;
  std::vector<int32_t> writer_;
};

// Sub-chunk orders of host h's inter-host ring: reduce-scatter order, and the order in
// which its results become final.
std::vector<int> reduceOrder(int h, int H) {
  std::vector<int> o;
  for (int i = 0; i < H; ++i) o.push_back(mod(int64_t{h} - i, H));
  return o;
}
std::vector<int> spreadOrder(int h, int H) {
  std::vector<int> o;
  for (int i = 0; i < H; ++i) o.push_back(mod(int64_t{h} + 1 - i, H));
  return o;
}

uint32_t u32(int x) { return static_cast<uint32_t>(std::max(x, 0)); }

void shardVariant(Schedule& s, int rank, const HostLayout& hosts, size_t count, size_t segElems) {
  const int H = hosts.hosts();
  const int h = hosts.hostOf[static_cast<size_t>(rank)];
  const int l = hosts.localOf[static_cast<size_t>(rank)];
  const std::vector<int>& local = hosts.members[static_cast<size_t>(h)];
  const int L = static_cast<int>(local.size());
  const uint32_t p1 = u32(L - 1), p2 = u32(H - 1);
  s.phases.push_back({"intra-host reduce-scatter", 0, p1});
  s.phases.push_back({"inter-host reduce-scatter", p1, p2});
  s.phases.push_back({"inter-host all-gather", p1 + p2, p2});
  s.phases.push_back({"intra-host all-gather", p1 + 2 * p2, p1});
  if (hosts.worldSize() <= 1 || count == 0) return;

  const Pieces pieces(count, L, H, segElems);
  Builder b(s, pieces);
  const int localNext = local[static_cast<size_t>(ring::next(l, L))];
  const int localPrev = local[static_cast<size_t>(ring::prev(l, L))];
  if (L > 1) {
    std::vector<std::vector<size_t>> shards;
    for (int j = 0; j < L; ++j) shards.push_back(pieces.of(j, reduceOrder(h, H)));
    b.ringReduceScatter(l, L, localNext, localPrev, 0, shards, H == 1);
  }
  const int owned = ring::ownedChunk(l, L);
  if (H > 1) {
    std::vector<std::vector<size_t>> subs;
    for (int c = 0; c < H; ++c) subs.push_back(pieces.sub(owned, c));
    const int next = hosts.members[static_cast<size_t>(ring::next(h, H))][static_cast<size_t>(l)];
    const int prev = hosts.members[static_cast<size_t>(ring::prev(h, H))][static_cast<size_t>(l)];
    b.ringReduceScatter(h, H, next, prev, p1, subs, true);
    b.ringAllGather(h, H, next, prev, p1 + p2, subs);
  }
  if (L > 1) {
    std::vector<std::vector<size_t>> shards;
    for (int j = 0; j < L; ++j) shards.push_back(pieces.of(j, spreadOrder(h, H)));
    b.ringAllGather(l, L, localNext, localPrev, p1 + 2 * p2, shards);
  }
}

void leaderVariant(Schedule& s, int rank, const HostLayout& hosts, size_t count, size_t segElems) {
  const int H = hosts.hosts();
  const int h = hosts.hostOf[static_cast<size_t>(rank)];
  const int l = hosts.localOf[static_cast<size_t>(rank)];
  const std::vector<int>& local = hosts.members[static_cast<size_t>(h)];
  const int L = static_cast<int>(local.size());
  const int lmax = hosts.maxLocal();
  const uint32_t p1 = u32(lmax - 1), p2 = u32(H - 1);
  s.phases.push_back({"intra-host reduce to the leader", 0, p1});
  s.phases.push_back({"inter-host reduce-scatter (leaders)", p1, p2});
  s.phases.push_back({"inter-host all-gather (leaders)", p1 + p2, p2});
  s.phases.push_back({"intra-host broadcast from the leader", p1 + 2 * p2, p1});
  if (hosts.worldSize() <= 1 || count == 0) return;

  const Pieces pieces(count, 1, H, segElems);
  Builder b(s, pieces);
  auto at = [&](int i) { return local[static_cast<size_t>(i)]; };
  // Chain reduce: the hop l -> l-1 is step lmax-1-l.
  const std::vector<size_t> up = pieces.of(0, reduceOrder(h, H));
  for (size_t id : up) {
    if (l + 1 < L) b.recvReduce(at(l + 1), u32(lmax - 2 - l), id, l == 0 && H == 1);
    if (l > 0) b.send(at(l - 1), u32(lmax - 1 - l), id);
  }
  if (l == 0 && H > 1) {
    std::vector<std::vector<size_t>> chunks;
    for (int c = 0; c < H; ++c) chunks.push_back(pieces.sub(0, c));
    const int next = hosts.members[static_cast<size_t>(ring::next(h, H))][0];
    const int prev = hosts.members[static_cast<size_t>(ring::prev(h, H))][0];
    b.ringReduceScatter(h, H, next, prev, p1, chunks, true);
    b.ringAllGather(h, H, next, prev, p1 + p2, chunks);
  }
  // Chain broadcast: the hop l -> l+1 is step p1 + 2 p2 + l.
  const uint32_t p3 = p1 + 2 * p2;
  for (size_t id : pieces.of(0, spreadOrder(h, H))) {
    if (l > 0) b.recvCopy(at(l - 1), p3 + u32(l - 1), id);
    if (l + 1 < L) b.send(at(l + 1), p3 + u32(l), id);
  }
}

}  // namespace

Schedule hierarchicalAllreduce(int rank, const HostLayout& hosts, size_t count, size_t segElems) {
  Schedule s;
  s.algorithm = "hier";
  segElems = std::max<size_t>(segElems, 1);
  if (hierUsesLeaders(hosts)) {
    leaderVariant(s, rank, hosts, count, segElems);
  } else {
    shardVariant(s, rank, hosts, count, segElems);
  }
  collectPeers(s);
  return s;
}

// ---- closed forms --------------------------------------------------------------------

HostBytes hierBytesSent(const HostLayout& hosts, size_t count, size_t elemSize, int r) {
  HostBytes b;
  const int H = hosts.hosts();
  const int h = hosts.hostOf[static_cast<size_t>(r)];
  const int l = hosts.localOf[static_cast<size_t>(r)];
  const int L = hosts.localSize(r);
  if (hosts.worldSize() <= 1 || count == 0) return b;
  if (hierUsesLeaders(hosts)) {
    const uint64_t v = uint64_t{count} * elemSize;
    b.intra = v * ((l > 0 ? 1u : 0u) + (l + 1 < L ? 1u : 0u));
    b.inter = l == 0 ? ringBytesSent(count, elemSize, H, h) : 0;
    return b;
  }
  b.intra = ringBytesSent(count, elemSize, L, l);
  b.inter = ringBytesSent(chunkRange(count, L, ring::ownedChunk(l, L)).count, elemSize, H, h);
  return b;
}

int hierSteps(const HostLayout& hosts) {
  const int H = hosts.hosts();
  const int L = hosts.maxLocal();
  return 2 * std::max(L - 1, 0) + 2 * std::max(H - 1, 0);
}

uint64_t hostEgressBytes(Algorithm a, const HostLayout& hosts, size_t count, size_t elemSize) {
  const int n = hosts.worldSize();
  std::vector<uint64_t> out(static_cast<size_t>(hosts.hosts()), 0);
  for (int r = 0; r < n; ++r) {
    const int h = hosts.hostOf[static_cast<size_t>(r)];
    uint64_t& o = out[static_cast<size_t>(h)];
    switch (a) {
      case Algorithm::Ring:
        if (n > 1 && hosts.hostOf[static_cast<size_t>(ring::next(r, n))] != h) {
          o += ringBytesSent(count, elemSize, n, r);
        }
        break;
      case Algorithm::Naive:
        o += uint64_t{count} * elemSize * static_cast<uint64_t>(n - hosts.localSize(r));
        break;
      case Algorithm::Hierarchical:
        o += hierBytesSent(hosts, count, elemSize, r).inter;
        break;
      default: {
        // One segment per range: a handful of ops per rank for tree, hd and rd.
        const Schedule s = allreduceSchedule(a, r, n, count, std::max<size_t>(count, 1), &hosts);
        for (const Op& op : s.ops) {
          if (op.type == OpType::Send && hosts.hostOf[static_cast<size_t>(op.peer)] != h) {
            o += uint64_t{op.range.count} * elemSize;
          }
        }
        break;
      }
    }
  }
  return out.empty() ? 0 : *std::max_element(out.begin(), out.end());
}

}  // namespace tccl::algo
