// The public calls' validation: a call's arguments are checked, and its algorithm
// settled, before it takes its sequence number. A bad argument is an InvalidArgument,
// which leaves the communicator usable (docs/errors.md).
#include <algorithm>
#include <initializer_list>

#include "algorithms/allreduce.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "core/comm_impl.hpp"

namespace tccl {

namespace {

bool overlaps(const uint8_t* a, size_t an, const uint8_t* b, size_t bn) {
  return a != nullptr && b != nullptr && an > 0 && bn > 0 && a < b + bn && b < a + an;
}

}  // namespace

void Communicator::Impl::invalid(const std::string& msg) const {
  throwError(ErrorKind::InvalidArgument, msg, boot.rank);
}

void Communicator::Impl::validate(PreparedCall& call) const {
  const char* name = kindName(call.kind);
  auto bad = [&](const std::string& why) { invalid(std::string(name) + ": " + why); };
  if (!isValid(call.dtype)) bad("unknown dtype " + std::to_string(static_cast<int>(call.dtype)));
  if (!isValid(call.op)) bad("unknown reduce op " + std::to_string(static_cast<int>(call.op)));
  if (call.timeout) {
    config::checkTimeout(std::string(name) +
                             ": a per-call timeout (CollectiveOptions::timeout) of " +
                             std::to_string(call.timeout->count()) + " ms",
                         call.timeout->count(), boot.rank);
  }
  const size_t elem = dataTypeSize(call.dtype);
  const size_t n = static_cast<size_t>(boot.size);
  if (call.count > (size_t{1} << 62) / elem / n)
    bad("count " + std::to_string(call.count) + " too large");
  if (rooted(call.kind) && (call.root < 0 || call.root >= boot.size)) {
    bad("root " + std::to_string(call.root) + " not in [0, " + std::to_string(boot.size) + ")");
  }
  checkBuffers(call);
  settleAlgorithm(call);
}

// Null buffers, and overlaps other than the collective's in-place layout.
void Communicator::Impl::checkBuffers(const PreparedCall& call) const {
  const char* name = kindName(call.kind);
  auto bad = [&](const std::string& why) { invalid(std::string(name) + ": " + why); };
  const size_t n = static_cast<size_t>(boot.size);
  const size_t block = call.count * dataTypeSize(call.dtype);  // bytes per rank's block
  const bool isRoot = call.root == boot.rank;
  // Bytes each buffer must hold on this rank (0: not used here).
  size_t inBytes = block, outBytes = block;
  switch (call.kind) {
    case CallKind::AllReduce:
      break;
    case CallKind::ReduceScatter:
      inBytes = block * n;
      break;
    case CallKind::AllGather:
      outBytes = block * n;
      break;
    case CallKind::Broadcast:
      inBytes = isRoot ? block : 0;
      break;
    case CallKind::Reduce:
      outBytes = isRoot ? block : 0;
      break;
    case CallKind::Barrier:
      inBytes = outBytes = 0;
      break;
    case CallKind::AllToAll:
      inBytes = outBytes = block * n;
      break;
    case CallKind::Gather:
      outBytes = isRoot ? block * n : 0;
      break;
    case CallKind::Scatter:
      inBytes = isRoot ? block * n : 0;
      break;
  }
  if ((inBytes > 0 && call.in == nullptr) || (outBytes > 0 && call.out == nullptr)) {
    bad("null buffer with count > 0");
  }
  // In place is allowed where a collective defines it; any other overlap is an error.
  const size_t myBlock = static_cast<size_t>(boot.rank) * block;
  bool inPlace = call.in == call.out;
  if (call.kind == CallKind::AllGather || call.kind == CallKind::Gather) {
    inPlace = call.out != nullptr && call.in == call.out + myBlock;
  }
  if (call.kind == CallKind::ReduceScatter || call.kind == CallKind::Scatter) {
    inPlace = call.in != nullptr && call.out == call.in + myBlock;
  }
  if (call.kind == CallKind::AllToAll && inBytes > 0 && call.in == call.out) {
    bad("in-place all-to-all is not supported: use distinct buffers");
  }
  if (!inPlace && overlaps(call.in, inBytes, call.out, outBytes)) {
    bad("input and output overlap without being the collective's in-place layout");
  }
}

// The explanation (every candidate's predicted time) is formatted only when it will be
// logged: on an 8-byte call it would cost more than a tenth of the call.
void Communicator::Impl::settleAlgorithm(PreparedCall& call) const {
  const char* name = kindName(call.kind);
  auto bad = [&](const std::string& why) { invalid(std::string(name) + ": " + why); };
  std::string* explain = log::enabled(log::Level::Info) ? &call.why : nullptr;
  if (!explain) call.why.clear();
  auto allowed = [&](std::initializer_list<Algorithm> algos) {
    if (call.algorithm == Algorithm::Auto) return;
    for (Algorithm a : algos) {
      if (a == call.algorithm) return;
    }
    bad("algorithm " + std::string(toString(call.algorithm)) + " is not available here");
  };
  switch (call.kind) {
    case CallKind::AllReduce:
      // Auto is decided when the call runs (execute): the cost model needs the hosts,
      // read from the store once every rank has joined, and an asynchronous call must
      // not wait for that here. Every rank decides alike wherever it decides.
      if (call.algorithm != Algorithm::Auto &&
          std::find(algo::allreduceAlgorithms().begin(), algo::allreduceAlgorithms().end(),
                    call.algorithm) == algo::allreduceAlgorithms().end()) {
        bad("algorithm " + std::string(toString(call.algorithm)) + " is not available here");
      }
      if (boot.size == 1) call.algorithm = Algorithm::Ring;  // nothing moves
      break;
    case CallKind::Broadcast:
      allowed({Algorithm::Tree, Algorithm::Ring});
      if (call.algorithm == Algorithm::Auto) {
        call.algorithm = algo::chooseBroadcast(boot.size, call.count * dataTypeSize(call.dtype),
                                               boot.segmentBytes, boot.model, explain);
      }
      break;
    case CallKind::ReduceScatter:
    case CallKind::AllGather:
      allowed({Algorithm::Ring});
      call.algorithm = Algorithm::Ring;
      break;
    case CallKind::Reduce:
      allowed({Algorithm::Tree});
      call.algorithm = Algorithm::Tree;
      break;
    default:
      allowed({});
      call.algorithm = Algorithm::Auto;
      break;
  }
}

}  // namespace tccl
