// The uneven rows of the collective table (MPI's ...v calls): allgatherv,
// reduce_scatter_v, alltoallv, gatherv, scatterv. Their counts are BuildArgs::v
// (collectives.hpp, VCounts); buffer sizes, in-place offsets, schedules and byte closed
// forms all read them. The even rows: collective_spec.cpp.
#include <algorithm>
#include <numeric>

#include "algorithms/collective_spec.hpp"
#include "algorithms/collectives.hpp"

namespace tccl::algo {
namespace detail {
void fillUnevenRows(std::vector<CollectiveSpec>& t);
}  // namespace detail

namespace {

size_t un(int x) { return static_cast<size_t>(x); }
size_t at(const std::vector<size_t>& v, int i) { return v[un(i)]; }
size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }
bool isRoot(const BuildArgs& a) { return a.rank == a.root; }

// Elements a buffer of blocks (counts[p] at displs[p]) must hold: the end of the last
// non-empty block (an empty block's displacement is never read).
size_t extentOf(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t end = 0;
  for (size_t p = 0; p < counts.size() && p < displs.size(); ++p) {
    if (counts[p] > 0) end = std::max(end, displs[p] + counts[p]);
  }
  return end;
}

// The sum of counts but those of `skip` (-1: none), times elemSize.
uint64_t othersBytes(const std::vector<size_t>& counts, int skip, size_t e) {
  uint64_t t = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (static_cast<int>(p) != skip) t += counts[p];
  }
  return t * e;
}
uint64_t countMsgs(int k) { return static_cast<uint64_t>(k) * kCountMsgBytes; }

void copyLocal(Schedule& s, size_t offset, size_t count) {
  if (count > 0) addLocalCopy(s, Range{offset, count}, BufferId::Input, BufferId::Output);
}

double othersFactor(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0; }

// ---- allgatherv ----------------------------------------------------------------------------

size_t agvIn(const BuildArgs& a) { return a.count; }
size_t agvOut(const BuildArgs& a) { return extentOf(a.v->recvCounts, a.v->recvDispls); }
size_t agvOwn(const BuildArgs& a) { return at(a.v->recvDispls, a.rank); }

BuiltSchedule buildAllGatherV(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = ringAllGatherV(a.rank, a.n, a.v->recvCounts, a.v->recvDispls, a.segElems);
  b.inputOrigin = agvOwn(a);
  copyLocal(b.schedule, agvOwn(a), a.count);
  return b;
}

// Rank r sends every block but r+1's and receives every block but its own.
std::optional<uint64_t> agvSent(const BuildArgs& a, size_t e) {
  return a.n > 1 ? othersBytes(a.v->recvCounts, (a.rank + 1) % a.n, e) : 0;
}
std::optional<uint64_t> agvReceived(const BuildArgs& a, size_t e) {
  return a.n > 1 ? othersBytes(a.v->recvCounts, a.rank, e) : 0;
}

// ---- reduce_scatter_v ----------------------------------------------------------------------

size_t packedOffset(const std::vector<size_t>& counts, int p) {
  return std::accumulate(counts.begin(), counts.begin() + p, size_t{0});
}
size_t rsvIn(const BuildArgs& a) { return sum(a.v->recvCounts); }
size_t rsvOut(const BuildArgs& a) { return at(a.v->recvCounts, a.rank); }
size_t rsvOwn(const BuildArgs& a) { return packedOffset(a.v->recvCounts, a.rank); }

BuiltSchedule buildReduceScatterV(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = ringReduceScatterV(a.rank, a.n, a.v->recvCounts, a.segElems);
  b.outputOrigin = rsvOwn(a);
  if (a.n == 1 && a.count > 0) {
    addLocalCopy(b.schedule, Range{0, a.count}, BufferId::Input, BufferId::Output, -1, true);
  }
  return b;
}

// Rank r sends every block but its own and receives every block but r-1's.
std::optional<uint64_t> rsvSent(const BuildArgs& a, size_t e) {
  return a.n > 1 ? othersBytes(a.v->recvCounts, a.rank, e) : 0;
}
std::optional<uint64_t> rsvReceived(const BuildArgs& a, size_t e) {
  return a.n > 1 ? othersBytes(a.v->recvCounts, (a.rank + a.n - 1) % a.n, e) : 0;
}

// ---- alltoallv -----------------------------------------------------------------------------

size_t a2avIn(const BuildArgs& a) { return extentOf(a.v->sendCounts, a.v->sendDispls); }
size_t a2avOut(const BuildArgs& a) { return extentOf(a.v->recvCounts, a.v->recvDispls); }

BuiltSchedule buildAllToAllV(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = pairwiseAllToAllV(a.rank, a.n, *a.v, a.segElems);
  // See pairwiseAllToAllV: block r is at sendDispls[r] + recvDispls[r] in both.
  b.inputOrigin = at(a.v->recvDispls, a.rank);
  b.outputOrigin = at(a.v->sendDispls, a.rank);
  copyLocal(b.schedule, b.inputOrigin + at(a.v->sendDispls, a.rank), at(a.v->sendCounts, a.rank));
  return b;
}

// Every other rank's block, plus a count message each way per pair.
std::optional<uint64_t> a2avSent(const BuildArgs& a, size_t e) {
  return othersBytes(a.v->sendCounts, a.rank, e) + countMsgs(a.n - 1);
}
std::optional<uint64_t> a2avReceived(const BuildArgs& a, size_t e) {
  return othersBytes(a.v->recvCounts, a.rank, e) + countMsgs(a.n - 1);
}

// ---- gatherv and scatterv ------------------------------------------------------------------

size_t gvIn(const BuildArgs& a) { return a.count; }
size_t gvOut(const BuildArgs& a) {
  return isRoot(a) ? extentOf(a.v->recvCounts, a.v->recvDispls) : 0;
}
size_t gvOwn(const BuildArgs& a) { return isRoot(a) ? at(a.v->recvDispls, a.rank) : 0; }

BuiltSchedule buildGatherV(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = flatGatherV(a.rank, a.n, a.root, a.count, *a.v, a.segElems);
  if (isRoot(a)) {
    b.inputOrigin = gvOwn(a);
    copyLocal(b.schedule, gvOwn(a), a.count);
  }
  return b;
}

std::optional<uint64_t> gvSent(const BuildArgs& a, size_t e) {
  return isRoot(a) ? 0 : a.count * e + kCountMsgBytes;
}
std::optional<uint64_t> gvReceived(const BuildArgs& a, size_t e) {
  return isRoot(a) ? othersBytes(a.v->recvCounts, a.root, e) + countMsgs(a.n - 1) : 0;
}

size_t svIn(const BuildArgs& a) {
  return isRoot(a) ? extentOf(a.v->sendCounts, a.v->sendDispls) : 0;
}
size_t svOut(const BuildArgs& a) { return a.count; }
size_t svOwn(const BuildArgs& a) { return isRoot(a) ? at(a.v->sendDispls, a.rank) : 0; }

BuiltSchedule buildScatterV(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = flatScatterV(a.rank, a.n, a.root, a.count, *a.v, a.segElems);
  if (isRoot(a)) {
    b.outputOrigin = svOwn(a);
    copyLocal(b.schedule, svOwn(a), a.count);
  }
  return b;
}

std::optional<uint64_t> svSent(const BuildArgs& a, size_t e) {
  return isRoot(a) ? othersBytes(a.v->sendCounts, a.root, e) + countMsgs(a.n - 1) : 0;
}
std::optional<uint64_t> svReceived(const BuildArgs& a, size_t e) {
  return isRoot(a) ? 0 : a.count * e + kCountMsgBytes;
}

}  // namespace

void detail::fillUnevenRows(std::vector<CollectiveSpec>& t) {
  auto row = [&](Collective c, std::string_view name) -> CollectiveSpec& {
    CollectiveSpec& r = t[static_cast<size_t>(c)];
    r.id = c;
    r.name = r.ncclName = name;
    r.input = r.output = Extent::Counted;
    r.uneven = true;
    r.readsInputLate = [](Algorithm) { return false; };
    r.busBwFactor = othersFactor;
    return r;
  };
  {
    CollectiveSpec& r = row(Collective::AllGatherV, "allgatherv");
    r.aliases = {"all_gatherv", "all_gather_v", "agv"};
    r.inPlace = InPlaceRule::InIsOutBlock;
    r.algorithms = {Algorithm::Ring};
    r.defaultAlgorithm = Algorithm::Ring;
    r.build = buildAllGatherV;
    r.bytesSent = agvSent;
    r.bytesReceived = agvReceived;
    r.inputElemsOf = agvIn;
    r.outputElemsOf = agvOut;
    r.ownOffset = agvOwn;
  }
  {
    CollectiveSpec& r = row(Collective::ReduceScatterV, "reduce_scatter_v");
    r.aliases = {"reduce_scatterv", "reducescatterv", "rsv"};
    r.inPlace = InPlaceRule::OutIsInBlock;
    r.takesOp = true;
    r.algorithms = {Algorithm::Ring};
    r.defaultAlgorithm = Algorithm::Ring;
    r.build = buildReduceScatterV;
    r.bytesSent = rsvSent;
    r.bytesReceived = rsvReceived;
    r.inputElemsOf = rsvIn;
    r.outputElemsOf = rsvOut;
    r.ownOffset = rsvOwn;
  }
  {
    CollectiveSpec& r = row(Collective::AllToAllV, "alltoallv");
    r.aliases = {"all_to_allv", "all_to_all_v", "a2av"};
    r.inPlace = InPlaceRule::Refused;
    r.build = buildAllToAllV;
    r.bytesSent = a2avSent;
    r.bytesReceived = a2avReceived;
    r.inputElemsOf = a2avIn;
    r.outputElemsOf = a2avOut;
    r.ownOffset = [](const BuildArgs&) { return size_t{0}; };
  }
  {
    CollectiveSpec& r = row(Collective::GatherV, "gatherv");
    r.aliases = {"gather_v"};
    r.inPlace = InPlaceRule::InIsOutBlock;
    r.rooted = true;
    r.build = buildGatherV;
    r.bytesSent = gvSent;
    r.bytesReceived = gvReceived;
    r.inputElemsOf = gvIn;
    r.outputElemsOf = gvOut;
    r.ownOffset = gvOwn;
  }
  {
    CollectiveSpec& r = row(Collective::ScatterV, "scatterv");
    r.aliases = {"scatter_v"};
    r.inPlace = InPlaceRule::OutIsInBlock;
    r.rooted = true;
    r.build = buildScatterV;
    r.bytesSent = svSent;
    r.bytesReceived = svReceived;
    r.inputElemsOf = svIn;
    r.outputElemsOf = svOut;
    r.ownOffset = svOwn;
  }
}

// ---- checks --------------------------------------------------------------------------------

namespace {

std::string idx(const char* name, int p) {
  return std::string(name) + "[" + std::to_string(p) + "]";
}

// A vector the row reads must have one entry per rank.
std::optional<std::string> sized(const std::vector<size_t>& v, const char* name, int n) {
  if (v.size() == un(n)) return std::nullopt;
  return std::string(name) + " has " + std::to_string(v.size()) + " entries for " +
         std::to_string(n) + " ranks";
}

// Non-empty blocks written by the call must not overlap (each element has one source).
std::optional<std::string> disjoint(const std::vector<size_t>& counts,
                                    const std::vector<size_t>& displs, const char* what) {
  std::vector<std::pair<size_t, size_t>> blocks;  // (start, rank)
  for (size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] > 0) blocks.emplace_back(displs[p], p);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    const size_t prev = blocks[i - 1].second;
    if (displs[prev] + counts[prev] > blocks[i].first) {
      return std::string("blocks ") + std::to_string(prev) + " and " +
             std::to_string(blocks[i].second) + " of the " + what + " overlap";
    }
  }
  return std::nullopt;
}

// This rank's own count, given twice, must agree with itself.
std::optional<std::string> same(size_t mine, const char* mineName, size_t other,
                                const std::string& otherName) {
  if (mine == other) return std::nullopt;
  return std::string(mineName) + " " + std::to_string(mine) + " but " + otherName + " is " +
         std::to_string(other);
}

std::optional<std::string> fits(const std::vector<size_t>& counts,
                                const std::vector<size_t>& displs, size_t e) {
  for (size_t p = 0; p < counts.size(); ++p) {
    const size_t d = displs.empty() ? 0 : displs[p];
    const size_t limit = (size_t{1} << 62) / e;
    if (counts[p] > limit || d > limit - counts[p]) {
      return "block " + std::to_string(p) + " (count " + std::to_string(counts[p]) +
             ", displacement " + std::to_string(d) + ") too large";
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> checkCounts(const BuildArgs& a, size_t e) {
  const CollectiveSpec& s = spec(a.collective);
  if (!s.uneven) return std::nullopt;
  if (a.v == nullptr) return "no counts";
  const VCounts& v = *a.v;
  const int n = a.n;
  std::optional<std::string> bad;
  auto both = [&](const std::vector<size_t>& c, const std::vector<size_t>& d, const char* cn,
                  const char* dn) {
    if (!bad) bad = sized(c, cn, n);
    if (!bad && !d.empty()) bad = sized(d, dn, n);
    if (!bad) bad = fits(c, d, e);
  };
  switch (a.collective) {
    case Collective::AllGatherV:
      both(v.recvCounts, v.recvDispls, "recvCounts", "recvDispls");
      if (!bad)
        bad = same(a.count, "sendCount", at(v.recvCounts, a.rank), idx("recvCounts", a.rank));
      if (!bad) bad = disjoint(v.recvCounts, v.recvDispls, "output");
      break;
    case Collective::ReduceScatterV:
      both(v.recvCounts, {}, "recvCounts", "");
      if (!bad && sum(v.recvCounts) > (size_t{1} << 62) / e) bad = "the counts' sum is too large";
      break;
    case Collective::AllToAllV:
      both(v.sendCounts, v.sendDispls, "sendCounts", "sendDispls");
      both(v.recvCounts, v.recvDispls, "recvCounts", "recvDispls");
      if (!bad) {
        bad = same(at(v.sendCounts, a.rank), ("sendCounts[" + std::to_string(a.rank) + "]").c_str(),
                   at(v.recvCounts, a.rank), idx("recvCounts", a.rank));
      }
      if (!bad) bad = disjoint(v.recvCounts, v.recvDispls, "output");
      break;
    case Collective::GatherV:
      if (isRoot(a)) {
        both(v.recvCounts, v.recvDispls, "recvCounts", "recvDispls");
        if (!bad)
          bad = same(a.count, "sendCount", at(v.recvCounts, a.rank), idx("recvCounts", a.rank));
        if (!bad) bad = disjoint(v.recvCounts, v.recvDispls, "output");
      }
      break;
    case Collective::ScatterV:
      if (isRoot(a)) {
        both(v.sendCounts, v.sendDispls, "sendCounts", "sendDispls");
        if (!bad)
          bad = same(a.count, "recvCount", at(v.sendCounts, a.rank), idx("sendCounts", a.rank));
      }
      break;
    default:
      break;
  }
  return bad;
}

uint64_t sharedCountsDigest(const BuildArgs& a) {
  if (a.v == nullptr ||
      (a.collective != Collective::AllGatherV && a.collective != Collective::ReduceScatterV)) {
    return 0;
  }
  // FNV-1a over the counts' 8-byte little-endian values (any digest that differs
  // between count vectors that differ will do: the fingerprint hashes it again).
  uint64_t h = 1469598103934665603ull;
  for (size_t x : a.v->recvCounts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(x) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace tccl::algo
