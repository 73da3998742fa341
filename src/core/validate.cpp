// The public calls' validation: a call's arguments are checked, and its algorithm
// settled, before it takes its sequence number. What each collective allows (its buffer
// sizes, in-place layout, root, algorithms) is its row of the collective table
// (algorithms/collective_spec.hpp). A bad argument is an InvalidArgument, which leaves
// the communicator usable (docs/errors.md).
#include "algorithms/collective_spec.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "core/comm_impl.hpp"

namespace tccl {

void Communicator::Impl::invalid(const std::string& msg) const {
  ErrorInfo info;
  info.kind = ErrorKind::InvalidArgument;
  info.message = msg;
  info.rank = boot.rank;
  nameRanks(info);  // a sub-communicator's rank in its parent's and the world's numbering
  throwError(std::move(info));
}

void Communicator::Impl::invalidCall(const PreparedCall& call, const std::string& why) const {
  invalid(std::string(algo::spec(call.kind).name) + ": " + why);
}

void Communicator::Impl::validate(PreparedCall& call) const {
  const algo::CollectiveSpec& s = algo::spec(call.kind);
  if (!isValid(call.dtype)) {
    invalidCall(call, "unknown dtype " + std::to_string(static_cast<int>(call.dtype)));
  }
  if (!isValid(call.op)) {
    invalidCall(call, "unknown reduce op " + std::to_string(static_cast<int>(call.op)));
  }
  if (s.takesOp && isBitwise(call.op) && !isInteger(call.dtype)) {
    invalidCall(call, "reduce op " + std::string(toString(call.op)) +
                          " needs an integer dtype (int8, uint8, int32, int64), got " +
                          std::string(toString(call.dtype)));
  }
  if (call.timeout) {
    config::checkTimeout(std::string(s.name) +
                             ": a per-call timeout (CollectiveOptions::timeout) of " +
                             std::to_string(call.timeout->count()) + " ms",
                         call.timeout->count(), boot.rank);
  }
  if (!algo::countFits(call.count, dataTypeSize(call.dtype), boot.size)) {
    invalidCall(call, "count " + std::to_string(call.count) + " too large");
  }
  if (s.rooted && (call.root < 0 || call.root >= boot.size)) {
    invalidCall(call, "root " + std::to_string(call.root) + " not in [0, " +
                          std::to_string(boot.size) + ")");
  }
  if (s.uneven) {
    const algo::BuildArgs a = argsOf(call);
    if (auto bad = algo::checkCounts(a, dataTypeSize(call.dtype))) invalidCall(call, *bad);
  }
  checkBuffers(call);
  settleAlgorithm(call);
}

algo::BuildArgs Communicator::Impl::argsOf(const PreparedCall& call) const {
  algo::BuildArgs a;
  a.collective = call.kind;
  a.rank = boot.rank;
  a.n = boot.size;
  a.root = call.root;
  a.count = call.count;
  a.algorithm = call.algorithm;
  a.v = call.v.get();
  a.elemSize = dataTypeSize(call.dtype);
  return a;
}

// Null buffers, and overlaps other than the collective's in-place layout; records
// whether the call is in place.
void Communicator::Impl::checkBuffers(PreparedCall& call) const {
  const size_t elem = dataTypeSize(call.dtype);
  const algo::BuildArgs a = argsOf(call);
  // Bytes each buffer must hold on this rank (0: not used here).
  const uint64_t inBytes = algo::inputElems(a) * elem;
  const uint64_t outBytes = algo::outputElems(a) * elem;
  if ((inBytes > 0 && call.in == nullptr) || (outBytes > 0 && call.out == nullptr)) {
    invalidCall(call, "null buffer with count > 0");
  }
  // In place is allowed where a collective defines it; any other overlap is an error.
  switch (algo::classify(a, call.in, call.out, elem)) {
    case algo::Placement::InPlaceRefused:
      // alltoall and alltoallv alike (the message starts with the call's name).
      invalidCall(call, "in-place all-to-all is not supported: use distinct buffers");
    case algo::Placement::Overlap:
      invalidCall(call, "input and output overlap without being the collective's in-place layout");
    case algo::Placement::InPlace:
      call.inPlace = true;
      break;
    case algo::Placement::Distinct:
      call.inPlace = false;
      break;
  }
}

// What the call runs: the row's fixed algorithm, broadcast's choice for Auto, or (for an
// all-reduce of more than one rank) the one requested. Auto all-reduce is decided when
// the call runs (execute): the cost model needs the hosts, read from the store once every
// rank has joined, and an asynchronous call must not wait for that here. Every rank
// decides alike wherever it decides.
// The explanation (every candidate's predicted time) is formatted only when it will be
// logged: on an 8-byte call it would cost more than a tenth of the call.
void Communicator::Impl::settleAlgorithm(PreparedCall& call) const {
  std::string* explain = log::enabled(log::Level::Info) ? &call.why : nullptr;
  if (!explain) call.why.clear();
  const std::optional<Algorithm> settled = algo::resolveAtIssue(
      call.kind, call.algorithm, boot.size, call.count * dataTypeSize(call.dtype),
      boot.segmentBytes, boot.model, explain);
  if (!settled) {
    invalidCall(call,
                "algorithm " + std::string(toString(call.algorithm)) + " is not available here");
  }
  call.algorithm = *settled;
}

}  // namespace tccl
