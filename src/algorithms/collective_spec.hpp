// The collective table: one row per collective with everything a caller needs to know
// about it, so that the communicator's validation and execution, tools/bench.cpp and
// the Python binding read one place instead of restating it (docs/architecture.md,
// "The collective table"). A row holds:
//   - its names: the one errors, fingerprints and CallStats use ("allreduce"), the
//     nccl-tests one ("all_reduce") and short aliases ("ar"), all found by
//     parseCollective;
//   - its buffers: how many elements the input and the output hold on a given rank
//     (Extent), and which layout of the two counts as in place (InPlaceRule);
//   - rooted or not, takes a reduce op or not;
//   - its algorithms: the ones a call may name, what Auto becomes, and whether the
//     algorithm reads its input after writing its output (in place it then runs on a
//     copy);
//   - its schedule builder: the existing builder's schedule (collectives.hpp,
//     allreduce.hpp) plus the local work as Copy ops, and the buffers' origins;
//   - its byte closed forms per rank and algorithm, where they exist;
//   - its nccl-tests bus-bandwidth factor.
// Send and receive are point to point, not collectives: they have no row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/collectives.hpp"
#include "algorithms/schedule.hpp"
#include "tccl/types.hpp"

namespace tccl::algo {

struct HostLayout;
struct LinkModel;

enum class Collective : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Reduce,
  Barrier,
  AllToAll,
  Gather,
  Scatter,
  // The uneven ones (MPI's ...v calls): their counts are BuildArgs::v.
  AllGatherV,
  ReduceScatterV,
  AllToAllV,
  GatherV,
  ScatterV,
};
inline constexpr size_t kCollectiveCount = 14;

// How many elements a buffer holds on one rank, for `count` elements per block (the
// count a call passes) and world size n.
enum class Extent : uint8_t {
  None,        // no buffer
  Block,       // count, on every rank
  Blocks,      // n x count, on every rank
  RootBlock,   // count at the root, none elsewhere
  RootBlocks,  // n x count at the root, none elsewhere
  Counted,     // from the call's counts and displacements (CollectiveSpec::inputElemsOf)
};

// The layout of input and output that counts as in place (block = count elements).
enum class InPlaceRule : uint8_t {
  SamePointer,   // in == out
  InIsOutBlock,  // in == out + rank x block: the input is this rank's block of the output
  OutIsInBlock,  // out == in + rank x block: the output is this rank's block of the input
  Refused,       // no in-place form: in == out with a non-empty input is an error
};

// What a pair of buffers is to a collective (classify).
enum class Placement : uint8_t {
  Distinct,        // no overlap
  InPlace,         // the collective's in-place layout
  Overlap,         // they overlap some other way: an error
  InPlaceRefused,  // in == out where the rule is Refused: an error
};

// What a call that asks for Algorithm::Auto runs.
enum class AutoChoice : uint8_t {
  Fixed,      // the row's default algorithm (one algorithm, or none to name)
  Broadcast,  // chooseBroadcast (select.hpp), when the call is issued
  Allreduce,  // chooseAllreduce over the job's hosts, when the call runs (one rank: ring)
};

// One rank's view of one call: what the builder and the byte closed forms need.
struct BuildArgs {  // sameBuild() below compares every field: a new one goes there too
  Collective collective = Collective::AllReduce;
  int rank = 0;
  int n = 1;
  int root = -1;  // rooted collectives only
  size_t count = 0;
  size_t segElems = 1;
  // An algorithm the row allows; Auto stands for the row's defaultAlgorithm (the cost
  // model's choices are the caller's: resolveAtIssue, chooseAllreduce).
  Algorithm algorithm = Algorithm::Auto;
  const HostLayout* hosts = nullptr;  // the hierarchical all-reduce's hosts (null: one each)
  bool inPlace = false;               // classify() said InPlace
  // Bytes per element (0: unknown; the schedule is then the one for large data). Only
  // the two-rank ring all-reduce's order depends on it (ringAllreduce).
  size_t elemSize = 0;
  // The uneven collectives' counts (null for the others). `count` is then this rank's
  // own: allgatherv, gatherv its send count, scatterv its receive count,
  // reduce_scatter_v recvCounts[rank], alltoallv the sum of its send counts.
  const VCounts* v = nullptr;
};

// Whether two calls get the same schedule from build(): every argument equal (the
// uneven collectives' counts are compared by address only, so callers reuse a schedule
// only for v == nullptr).
bool sameBuild(const BuildArgs& a, const BuildArgs& b);

// A built schedule with what the executor needs besides the ops.
struct BuiltSchedule {
  // The builder's ops, then the local copies as OpType::Copy (never depending on
  // anything: no copy reads or writes a range another op of the schedule touches). A
  // copy whose source and destination are the same memory (in place) is a no-op the
  // executor skips; it is still listed, so that a schedule says the same for every
  // buffer layout. At world size 1 the reducing collectives' copy has finalize set (Avg
  // divides there).
  Schedule schedule;
  // Element offsets of the buffers in the collective's logical vector (the executor's
  // ExecContext::inputOrigin / outputOrigin).
  size_t inputOrigin = 0;
  size_t outputOrigin = 0;
  // In place, the algorithm reads its input after it has written its output (naive
  // all-reduce): the caller copies the input and runs the schedule on the copy.
  bool needsInputCopy = false;
};

struct CollectiveSpec {
  Collective id = Collective::AllReduce;
  std::string_view name;      // errors, fingerprints, CallStats, Work: "allreduce"
  std::string_view ncclName;  // the nccl-tests name: "all_reduce"
  std::vector<std::string_view> aliases;
  Extent input = Extent::Block;
  Extent output = Extent::Block;
  InPlaceRule inPlace = InPlaceRule::SamePointer;
  bool rooted = false;
  bool takesOp = false;  // the reduce op matters (else the call passes Sum)
  // The algorithms a call may name besides Auto (empty: only Auto).
  std::vector<Algorithm> algorithms;
  AutoChoice autoChoice = AutoChoice::Fixed;
  // What Auto (and, for AutoChoice::Fixed rows, any allowed name) resolves to: the
  // value the call carries in its fingerprint. Auto for rows with nothing to name.
  Algorithm defaultAlgorithm = Algorithm::Auto;
  // In place, the algorithm needs a copy of its input (allreduceReadsInputLate).
  bool (*readsInputLate)(Algorithm) = nullptr;
  BuiltSchedule (*build)(const BuildArgs&) = nullptr;
  // Payload bytes rank args.rank sends / receives (nullopt: no closed form for that
  // algorithm). args.segElems and args.inPlace do not matter.
  std::optional<uint64_t> (*bytesSent)(const BuildArgs&, size_t elemSize) = nullptr;
  std::optional<uint64_t> (*bytesReceived)(const BuildArgs&, size_t elemSize) = nullptr;
  // nccl-tests' busbw = algbw x factor, algbw = (bytes of the larger buffer) / time.
  double (*busBwFactor)(int n) = nullptr;
  // Uneven rows (Extent::Counted): the elements of this rank's buffers, and the element
  // offset of this rank's own block in the N-block buffer of its in-place layout.
  bool uneven = false;
  size_t (*inputElemsOf)(const BuildArgs&) = nullptr;
  size_t (*outputElemsOf)(const BuildArgs&) = nullptr;
  size_t (*ownOffset)(const BuildArgs&) = nullptr;
};

// ---- the table -------------------------------------------------------------------------

// Every row, indexed by the enum's value.
const std::vector<CollectiveSpec>& collectiveTable();
const CollectiveSpec& spec(Collective c);
// Any of a row's names: name, ncclName or an alias, ignoring case, '-' the same as '_'
// ("allreduce", "all_reduce", "AR", "all-gather", "bcast", "a2a", ...).
std::optional<Collective> parseCollective(std::string_view s);
// "allreduce, reduce_scatter, ..." (the rows' names in table order), for usage messages.
std::string collectiveNames(std::string_view separator = ", ");

// ---- buffers ---------------------------------------------------------------------------

// Elements / bytes of this rank's input and output (0: none on this rank).
size_t elemsOf(Extent e, size_t count, int n, int rank, int root);
size_t inputElems(Collective c, size_t count, int n, int rank, int root);
size_t outputElems(Collective c, size_t count, int n, int rank, int root);
uint64_t inputBytes(Collective c, size_t count, size_t elemSize, int n, int rank, int root);
uint64_t outputBytes(Collective c, size_t count, size_t elemSize, int n, int rank, int root);
// Whether this rank has the buffer at all (whatever the count): false for a rooted
// buffer off the root and for Extent::None.
bool hasBuffer(Extent e, int rank, int root);
bool hasInput(Collective c, int rank, int root);
bool hasOutput(Collective c, int rank, int root);
// count x elemSize x n stays within the communicator's limit (2^62 bytes).
bool countFits(size_t count, size_t elemSize, int n);
// The two buffers of a call on this rank (sizes from the row's extents).
Placement classify(Collective c, const void* in, const void* out, size_t count, size_t elemSize,
                   int n, int rank, int root);
// The same for any row, uneven ones included (their sizes from a.v).
size_t inputElems(const BuildArgs& a);
size_t outputElems(const BuildArgs& a);
Placement classify(const BuildArgs& a, const void* in, const void* out, size_t elemSize);
// An uneven call's counts against its row: nullopt when they are consistent on this rank,
// else why not ("recvCounts has 3 entries for 4 ranks", "sendCount 5 but recvCounts[2] is
// 4", "blocks 1 and 2 of the output overlap", ...). What only the peers can tell (rank p's
// count for this pair) is checked by the count messages (collectives.hpp).
std::optional<std::string> checkCounts(const BuildArgs& a, size_t elemSize);
// The counts every rank must pass alike (allgatherv, reduce_scatter_v: the receive
// counts), as a digest for the call's fingerprint; 0 for the rows without.
uint64_t sharedCountsDigest(const BuildArgs& a);

// ---- algorithms ------------------------------------------------------------------------

// Auto, or one of the row's algorithms.
bool allows(Collective c, Algorithm a);
// What the communicator settles when a call is issued: nullopt when `requested` is not
// allowed; else the algorithm the call carries: Fixed rows their default, broadcast
// chooseBroadcast(n, bytes, segmentBytes, model, why) for Auto, all-reduce Ring at
// n = 1 and otherwise `requested` (Auto is decided when the call runs, with the hosts).
std::optional<Algorithm> resolveAtIssue(Collective c, Algorithm requested, int n, size_t bytes,
                                        size_t segmentBytes, const LinkModel& model,
                                        std::string* why);

// ---- schedules and bytes ---------------------------------------------------------------

// spec(a.collective).build(a). Throws InvalidArgumentError for an algorithm the row
// does not allow, a root outside [0, n) on a rooted collective, or a rank outside it.
BuiltSchedule build(const BuildArgs& a);
std::optional<uint64_t> bytesSent(const BuildArgs& a, size_t elemSize);
std::optional<uint64_t> bytesReceived(const BuildArgs& a, size_t elemSize);
double busBwFactor(Collective c, int n);

}  // namespace tccl::algo
