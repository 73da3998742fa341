#include "algorithms/collective_spec.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "algorithms/chunking.hpp"
#include "algorithms/collectives.hpp"
#include "algorithms/select.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {
namespace detail {
void fillUnevenRows(std::vector<CollectiveSpec>& t);  // collective_spec_uneven.cpp
}  // namespace detail

namespace {

uint64_t u64(size_t x) { return static_cast<uint64_t>(x); }
size_t un(int x) { return static_cast<size_t>(x); }

// ---- building blocks of the rows ---------------------------------------------------------

bool never(Algorithm) { return false; }

// A local copy of `count` elements at logical offset `at`, none for an empty range.
void copyLocal(Schedule& s, size_t at, size_t count, bool finalize = false) {
  if (count == 0) return;
  addLocalCopy(s, Range{at, count}, BufferId::Input, BufferId::Output, -1, finalize);
}

Algorithm pick(const BuildArgs& a) {
  return a.algorithm == Algorithm::Auto ? spec(a.collective).defaultAlgorithm : a.algorithm;
}

// The children of relative rank v in the binomial tree of n ranks rooted at 0 (the same
// set for binomialBroadcast and binomialReduce): v + 2^j for 2^j below v's lowest set
// bit (every 2^j < n for the root) with v + 2^j < n.
int binomialChildren(int v, int n) {
  int low = 1;
  while (low < n && (v & low) == 0) low <<= 1;
  int k = 0;
  for (int m = low >> 1; m > 0; m >>= 1) {
    if (v + m < n) ++k;
  }
  return k;
}

uint64_t othersTimes(const BuildArgs& a, size_t elemSize) {
  return a.n > 1 ? u64(un(a.n - 1) * a.count * elemSize) : 0;
}
uint64_t block(const BuildArgs& a, size_t elemSize) { return u64(a.count * elemSize); }
bool isRoot(const BuildArgs& a) { return a.rank == a.root; }
int relative(const BuildArgs& a) { return mod(int64_t{a.rank} - a.root, a.n); }

double zero(int) { return 0; }
double one(int) { return 1; }
double allreduceFactor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0; }
double othersFactor(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0; }

// ---- all-reduce --------------------------------------------------------------------------

BuiltSchedule buildAllreduce(const BuildArgs& a) {
  const Algorithm algo = pick(a);
  BuiltSchedule b;
  b.schedule = allreduceSchedule(algo, a.rank, a.n, a.count, a.segElems, a.hosts, a.elemSize);
  if (a.n == 1) copyLocal(b.schedule, 0, a.count, /*finalize=*/true);
  b.needsInputCopy = a.inPlace && a.n > 1 && a.count > 0 && allreduceReadsInputLate(algo);
  return b;
}

std::optional<uint64_t> allreduceSent(const BuildArgs& a, size_t e) {
  switch (pick(a)) {
    case Algorithm::Ring:
      return ringBytesSent(a.count, e, a.n, a.rank);
    case Algorithm::Naive:
      return a.n > 1 ? naiveBytesSent(a.count, e, a.n) : 0;
    case Algorithm::Tree:
      return treeBytesSent(a.count, e, a.n, a.rank);
    case Algorithm::HalvingDoubling:
      return hdBytesSent(a.count, e, a.n, a.rank);
    case Algorithm::RecursiveDoubling:
      return rdBytesSent(a.count, e, a.n, a.rank);
    case Algorithm::Hierarchical:
      return a.hosts ? hierBytesSent(*a.hosts, a.count, e, a.rank).total()
                     : hierBytesSent(HostLayout::separate(a.n), a.count, e, a.rank).total();
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> allreduceReceived(const BuildArgs& a, size_t e) {
  switch (pick(a)) {
    case Algorithm::Ring:
      // Every chunk but r in the reduce-scatter, every chunk but r+1 in the all-gather.
      return u64((2 * a.count - chunkRange(a.count, a.n, a.rank).count -
                  chunkRange(a.count, a.n, ring::ownedChunk(a.rank, a.n)).count) *
                 e);
    case Algorithm::Naive:
      return othersTimes(a, e);
    // Every edge of the two trees carries its half once up and once down; every
    // exchange of recursive doubling (and its fold) is symmetric.
    case Algorithm::Tree:
      return treeBytesSent(a.count, e, a.n, a.rank);
    case Algorithm::RecursiveDoubling:
      return rdBytesSent(a.count, e, a.n, a.rank);
    default:
      return std::nullopt;
  }
}

// ---- reduce-scatter and all-gather -------------------------------------------------------

BuiltSchedule buildReduceScatter(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = ringReduceScatter(a.rank, a.n, a.count, a.segElems);
  b.outputOrigin = un(a.rank) * a.count;
  if (a.n == 1) copyLocal(b.schedule, 0, a.count, /*finalize=*/true);
  return b;
}

BuiltSchedule buildAllGather(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = ringAllGather(a.rank, a.n, a.count, a.segElems);
  b.inputOrigin = un(a.rank) * a.count;
  copyLocal(b.schedule, un(a.rank) * a.count, a.count);  // this rank's own block
  return b;
}

std::optional<uint64_t> ringPassBytes(const BuildArgs& a, size_t e) { return othersTimes(a, e); }

// ---- broadcast and reduce ----------------------------------------------------------------

BuiltSchedule buildBroadcast(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = pick(a) == Algorithm::Tree
                   ? binomialBroadcast(a.rank, a.n, a.root, a.count, a.segElems)
                   : chainBroadcast(a.rank, a.n, a.root, a.count, a.segElems);
  if (isRoot(a)) copyLocal(b.schedule, 0, a.count);
  return b;
}

std::optional<uint64_t> broadcastSent(const BuildArgs& a, size_t e) {
  if (pick(a) == Algorithm::Tree) return block(a, e) * u64(binomialChildren(relative(a), a.n));
  return relative(a) < a.n - 1 ? block(a, e) : 0;  // the chain: all but its last forward
}

std::optional<uint64_t> broadcastReceived(const BuildArgs& a, size_t e) {
  return isRoot(a) ? 0 : block(a, e);
}

BuiltSchedule buildReduce(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = binomialReduce(a.rank, a.n, a.root, a.count, a.segElems);
  if (a.n == 1) copyLocal(b.schedule, 0, a.count, /*finalize=*/true);
  return b;
}

std::optional<uint64_t> toRootSent(const BuildArgs& a, size_t e) {
  return isRoot(a) ? 0 : block(a, e);
}

std::optional<uint64_t> reduceReceived(const BuildArgs& a, size_t e) {
  return block(a, e) * u64(binomialChildren(relative(a), a.n));
}

// ---- barrier and all-to-all --------------------------------------------------------------

BuiltSchedule buildBarrier(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = disseminationBarrier(a.rank, a.n);
  return b;
}

std::optional<uint64_t> nothing(const BuildArgs&, size_t) { return 0; }

BuiltSchedule buildAllToAll(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = pairwiseAllToAll(a.rank, a.n, a.count, a.segElems);
  copyLocal(b.schedule, un(a.rank) * a.count, a.count);  // block r stays here
  return b;
}

// ---- gather and scatter ------------------------------------------------------------------

BuiltSchedule buildGather(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = flatGather(a.rank, a.n, a.root, a.count, a.segElems);
  if (isRoot(a)) {
    // The root sends nothing from its input: it sits at its block of the output.
    b.inputOrigin = un(a.rank) * a.count;
    copyLocal(b.schedule, un(a.rank) * a.count, a.count);
  }
  return b;
}

std::optional<uint64_t> gatherReceived(const BuildArgs& a, size_t e) {
  return isRoot(a) ? othersTimes(a, e) : 0;
}

BuiltSchedule buildScatter(const BuildArgs& a) {
  BuiltSchedule b;
  b.schedule = flatScatter(a.rank, a.n, a.root, a.count, a.segElems);
  b.outputOrigin = un(a.rank) * a.count;
  if (isRoot(a)) copyLocal(b.schedule, un(a.rank) * a.count, a.count);
  return b;
}

std::optional<uint64_t> scatterSent(const BuildArgs& a, size_t e) {
  return isRoot(a) ? othersTimes(a, e) : 0;
}

// ---- the rows ----------------------------------------------------------------------------

// Out of line, so that the table's accessor (on every call's path, several times) stays
// a load and a test instead of saving the registers the construction needs.
[[gnu::noinline]] std::vector<CollectiveSpec> makeTable() {
  std::vector<CollectiveSpec> t(kCollectiveCount);
  auto row = [&](Collective c) -> CollectiveSpec& {
    CollectiveSpec& r = t[static_cast<size_t>(c)];
    r.id = c;
    r.readsInputLate = never;
    return r;
  };
  {
    CollectiveSpec& r = row(Collective::AllReduce);
    r.name = "allreduce";
    r.ncclName = "all_reduce";
    r.aliases = {"ar"};
    r.takesOp = true;
    r.algorithms = allreduceAlgorithms();
    r.autoChoice = AutoChoice::Allreduce;
    r.defaultAlgorithm = Algorithm::Ring;
    r.readsInputLate = allreduceReadsInputLate;
    r.build = buildAllreduce;
    r.bytesSent = allreduceSent;
    r.bytesReceived = allreduceReceived;
    r.busBwFactor = allreduceFactor;
  }
  {
    CollectiveSpec& r = row(Collective::ReduceScatter);
    r.name = "reduce_scatter";
    r.ncclName = "reduce_scatter";
    r.aliases = {"reducescatter", "rs"};
    r.input = Extent::Blocks;
    r.inPlace = InPlaceRule::OutIsInBlock;
    r.takesOp = true;
    r.algorithms = {Algorithm::Ring};
    r.defaultAlgorithm = Algorithm::Ring;
    r.build = buildReduceScatter;
    r.bytesSent = ringPassBytes;
    r.bytesReceived = ringPassBytes;
    r.busBwFactor = othersFactor;
  }
  {
    CollectiveSpec& r = row(Collective::AllGather);
    r.name = "allgather";
    r.ncclName = "all_gather";
    r.aliases = {"ag"};
    r.output = Extent::Blocks;
    r.inPlace = InPlaceRule::InIsOutBlock;
    r.algorithms = {Algorithm::Ring};
    r.defaultAlgorithm = Algorithm::Ring;
    r.build = buildAllGather;
    r.bytesSent = ringPassBytes;
    r.bytesReceived = ringPassBytes;
    r.busBwFactor = othersFactor;
  }
  {
    CollectiveSpec& r = row(Collective::Broadcast);
    r.name = "broadcast";
    r.ncclName = "broadcast";
    r.aliases = {"bcast"};
    r.input = Extent::RootBlock;
    r.rooted = true;
    r.algorithms = {Algorithm::Tree, Algorithm::Ring};  // binomial tree, pipelined chain
    r.autoChoice = AutoChoice::Broadcast;
    r.defaultAlgorithm = Algorithm::Tree;  // chooseBroadcast's tie-break
    r.build = buildBroadcast;
    r.bytesSent = broadcastSent;
    r.bytesReceived = broadcastReceived;
    r.busBwFactor = one;
  }
  {
    CollectiveSpec& r = row(Collective::Reduce);
    r.name = "reduce";
    r.ncclName = "reduce";
    r.output = Extent::RootBlock;
    r.rooted = true;
    r.takesOp = true;
    r.algorithms = {Algorithm::Tree};
    r.defaultAlgorithm = Algorithm::Tree;
    r.build = buildReduce;
    r.bytesSent = toRootSent;
    r.bytesReceived = reduceReceived;
    r.busBwFactor = one;
  }
  {
    CollectiveSpec& r = row(Collective::Barrier);
    r.name = "barrier";
    r.ncclName = "barrier";
    r.input = r.output = Extent::None;
    r.build = buildBarrier;
    r.bytesSent = nothing;
    r.bytesReceived = nothing;
    r.busBwFactor = zero;
  }
  {
    CollectiveSpec& r = row(Collective::AllToAll);
    r.name = "alltoall";
    r.ncclName = "alltoall";
    r.aliases = {"all_to_all", "a2a"};
    r.input = r.output = Extent::Blocks;
    r.inPlace = InPlaceRule::Refused;
    r.build = buildAllToAll;
    r.bytesSent = ringPassBytes;
    r.bytesReceived = ringPassBytes;
    r.busBwFactor = othersFactor;
  }
  {
    CollectiveSpec& r = row(Collective::Gather);
    r.name = "gather";
    r.ncclName = "gather";
    r.output = Extent::RootBlocks;
    r.inPlace = InPlaceRule::InIsOutBlock;
    r.rooted = true;
    r.build = buildGather;
    r.bytesSent = toRootSent;
    r.bytesReceived = gatherReceived;
    r.busBwFactor = othersFactor;
  }
  {
    CollectiveSpec& r = row(Collective::Scatter);
    r.name = "scatter";
    r.ncclName = "scatter";
    r.input = Extent::RootBlocks;
    r.inPlace = InPlaceRule::OutIsInBlock;
    r.rooted = true;
    r.build = buildScatter;
    r.bytesSent = scatterSent;
    r.bytesReceived = broadcastReceived;  // the root keeps its block, the others get one
    r.busBwFactor = othersFactor;
  }
  detail::fillUnevenRows(t);
  return t;
}

// Lower case, '-' as '_'.
std::string normalized(std::string_view s) {
  std::string out(s);
  for (char& ch : out) {
    ch = ch == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return out;
}

[[noreturn]] void invalidArgs(const CollectiveSpec& s, const std::string& why) {
  throwError(ErrorKind::InvalidArgument, std::string(s.name) + " schedule: " + why);
}

void check(const BuildArgs& a) {
  const CollectiveSpec& s = spec(a.collective);
  if (a.n < 1 || a.rank < 0 || a.rank >= a.n) {
    invalidArgs(s, "rank " + std::to_string(a.rank) + " of a world of " + std::to_string(a.n));
  }
  if (s.rooted && (a.root < 0 || a.root >= a.n)) {
    invalidArgs(s, "root " + std::to_string(a.root) + " not in [0, " + std::to_string(a.n) + ")");
  }
  if (!allows(a.collective, a.algorithm)) {
    invalidArgs(s, "algorithm " + std::string(toString(a.algorithm)) + " is not available here");
  }
  if (s.uneven) {
    // checkCounts with the smallest element: the sizes, overlaps and own counts.
    if (auto bad = checkCounts(a, 1)) invalidArgs(s, *bad);
  }
}

}  // namespace

const std::vector<CollectiveSpec>& collectiveTable() {
  static const std::vector<CollectiveSpec> kTable = makeTable();
  return kTable;
}

namespace {
[[noreturn, gnu::noinline, gnu::cold]] void unknownCollective(size_t i) {
  throwError(ErrorKind::InvalidArgument, "unknown collective " + std::to_string(i));
}
}  // namespace

const CollectiveSpec& spec(Collective c) {
  // A call looks its row up about 20 times (validation, the buffers' extents, the plan):
  // one pointer, not the table's accessor each time.
  static const CollectiveSpec* const kRows = collectiveTable().data();
  const auto i = static_cast<size_t>(c);
  if (i >= kCollectiveCount) unknownCollective(i);
  return kRows[i];
}

std::optional<Collective> parseCollective(std::string_view s) {
  const std::string want = normalized(s);
  for (const CollectiveSpec& r : collectiveTable()) {
    if (want == r.name || want == r.ncclName) return r.id;
    for (std::string_view a : r.aliases) {
      if (want == a) return r.id;
    }
  }
  return std::nullopt;
}

std::string collectiveNames(std::string_view separator) {
  std::string out;
  for (const CollectiveSpec& r : collectiveTable()) {
    if (!out.empty()) out += separator;
    out += r.name;
  }
  return out;
}

// ---- buffers ---------------------------------------------------------------------------

bool hasBuffer(Extent e, int rank, int root) {
  switch (e) {
    case Extent::None:
      return false;
    case Extent::Block:
    case Extent::Blocks:
    case Extent::Counted:
      return true;
    case Extent::RootBlock:
    case Extent::RootBlocks:
      return rank == root;
  }
  return false;
}

size_t elemsOf(Extent e, size_t count, int n, int rank, int root) {
  if (!hasBuffer(e, rank, root) || e == Extent::Counted) return 0;  // Counted: inputElems(a)
  return e == Extent::Blocks || e == Extent::RootBlocks ? count * un(n) : count;
}

size_t inputElems(Collective c, size_t count, int n, int rank, int root) {
  return elemsOf(spec(c).input, count, n, rank, root);
}
size_t outputElems(Collective c, size_t count, int n, int rank, int root) {
  return elemsOf(spec(c).output, count, n, rank, root);
}
uint64_t inputBytes(Collective c, size_t count, size_t elemSize, int n, int rank, int root) {
  return u64(inputElems(c, count, n, rank, root) * elemSize);
}
uint64_t outputBytes(Collective c, size_t count, size_t elemSize, int n, int rank, int root) {
  return u64(outputElems(c, count, n, rank, root) * elemSize);
}
bool hasInput(Collective c, int rank, int root) { return hasBuffer(spec(c).input, rank, root); }
bool hasOutput(Collective c, int rank, int root) { return hasBuffer(spec(c).output, rank, root); }

bool countFits(size_t count, size_t elemSize, int n) {
  return elemSize > 0 && n > 0 && count <= (size_t{1} << 62) / elemSize / un(n);
}

namespace {

// `mine`: bytes from the start of the N-block buffer of the in-place layout to this
// rank's block.
Placement classifyBytes(InPlaceRule rule, const void* in, const void* out, uint64_t mine,
                        uint64_t inBytes, uint64_t outBytes) {
  // Addresses as integers: "out + rank x block" need not point into any object.
  const auto i = reinterpret_cast<uintptr_t>(in);
  const auto o = reinterpret_cast<uintptr_t>(out);
  const auto m = static_cast<uintptr_t>(mine);
  bool inPlace = i == o;
  switch (rule) {
    case InPlaceRule::SamePointer:
    case InPlaceRule::Refused:
      break;
    case InPlaceRule::InIsOutBlock:
      inPlace = o != 0 && i == o + m;
      break;
    case InPlaceRule::OutIsInBlock:
      inPlace = i != 0 && o == i + m;
      break;
  }
  if (rule == InPlaceRule::Refused && inBytes > 0 && i == o) return Placement::InPlaceRefused;
  if (inPlace) return Placement::InPlace;
  const bool overlap =
      i != 0 && o != 0 && inBytes > 0 && outBytes > 0 && i < o + outBytes && o < i + inBytes;
  return overlap ? Placement::Overlap : Placement::Distinct;
}

}  // namespace

Placement classify(Collective c, const void* in, const void* out, size_t count, size_t elemSize,
                   int n, int rank, int root) {
  return classifyBytes(spec(c).inPlace, in, out, u64(un(rank) * count * elemSize),
                       inputBytes(c, count, elemSize, n, rank, root),
                       outputBytes(c, count, elemSize, n, rank, root));
}

size_t inputElems(const BuildArgs& a) {
  const CollectiveSpec& s = spec(a.collective);
  if (s.uneven) return a.v && hasBuffer(s.input, a.rank, a.root) ? s.inputElemsOf(a) : 0;
  return inputElems(a.collective, a.count, a.n, a.rank, a.root);
}

size_t outputElems(const BuildArgs& a) {
  const CollectiveSpec& s = spec(a.collective);
  if (s.uneven) return a.v && hasBuffer(s.output, a.rank, a.root) ? s.outputElemsOf(a) : 0;
  return outputElems(a.collective, a.count, a.n, a.rank, a.root);
}

Placement classify(const BuildArgs& a, const void* in, const void* out, size_t elemSize) {
  const CollectiveSpec& s = spec(a.collective);
  if (!s.uneven) return classify(a.collective, in, out, a.count, elemSize, a.n, a.rank, a.root);
  return classifyBytes(s.inPlace, in, out, u64((a.v ? s.ownOffset(a) : 0) * elemSize),
                       u64(inputElems(a) * elemSize), u64(outputElems(a) * elemSize));
}

// ---- algorithms ------------------------------------------------------------------------

bool allows(Collective c, Algorithm a) {
  if (a == Algorithm::Auto) return true;
  const auto& list = spec(c).algorithms;
  return std::find(list.begin(), list.end(), a) != list.end();
}

std::optional<Algorithm> resolveAtIssue(Collective c, Algorithm requested, int n, size_t bytes,
                                        size_t segmentBytes, const LinkModel& model,
                                        std::string* why) {
  if (!allows(c, requested)) return std::nullopt;
  const CollectiveSpec& s = spec(c);
  switch (s.autoChoice) {
    case AutoChoice::Fixed:
      return s.defaultAlgorithm;
    case AutoChoice::Broadcast:
      if (requested != Algorithm::Auto) return requested;
      return chooseBroadcast(n, bytes, segmentBytes, model, why);
    case AutoChoice::Allreduce:
      return n == 1 ? Algorithm::Ring : requested;  // one rank: nothing moves
  }
  return requested;
}

// ---- schedules and bytes ---------------------------------------------------------------

bool sameBuild(const BuildArgs& a, const BuildArgs& b) {
  return a.collective == b.collective && a.rank == b.rank && a.n == b.n && a.root == b.root &&
         a.count == b.count && a.segElems == b.segElems && a.algorithm == b.algorithm &&
         a.hosts == b.hosts && a.inPlace == b.inPlace && a.v == b.v && a.elemSize == b.elemSize;
}

BuiltSchedule build(const BuildArgs& a) {
  check(a);
  return spec(a.collective).build(a);
}

std::optional<uint64_t> bytesSent(const BuildArgs& a, size_t elemSize) {
  check(a);
  return spec(a.collective).bytesSent(a, elemSize);
}

std::optional<uint64_t> bytesReceived(const BuildArgs& a, size_t elemSize) {
  check(a);
  return spec(a.collective).bytesReceived(a, elemSize);
}

double busBwFactor(Collective c, int n) { return spec(c).busBwFactor(n); }

}  // namespace tccl::algo
