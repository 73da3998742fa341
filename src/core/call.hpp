// What one call of a Communicator is, as its rooms pass it along (core/comm_impl.hpp):
// the public calls fill a PreparedCall, validation checks it, the call queue numbers and
// runs it, and the failure protocol describes what a rank ran (Running) in its
// heartbeats and signatures. What each collective asks of its call (its name, buffers,
// in-place layout, root, op, algorithms) is its row of the collective table
// (algorithms/collective_spec.hpp), indexed by algo::Collective.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/collective_spec.hpp"
#include "tccl/types.hpp"

namespace tccl {

// A call that passed validation and has its place in the issue order.
struct PreparedCall {
  algo::Collective kind = algo::Collective::AllReduce;
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  size_t count = 0;  // per rank (see each collective's convention)
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;  // root, or the peer of a send/recv
  Algorithm algorithm = Algorithm::Ring;
  std::string why = "requested";
  std::optional<std::chrono::milliseconds> timeout;
  int64_t seq = -1;      // collectives: the communicator's sequence; p2p: per peer and direction
  bool inPlace = false;  // the buffers are the collective's in-place layout (algo::classify)
  // The uneven collectives' counts and displacements (null for the others), displacements
  // resolved (packed where the caller gave none). Shared: the call is queued and copied.
  std::shared_ptr<const algo::VCounts> v;
};

// What a rank is running now, for its heartbeat record (formatted by that thread).
struct Running {
  algo::Collective kind = algo::Collective::AllReduce;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;
  Algorithm algorithm = Algorithm::Ring;
  uint32_t fingerprint = 0;
  std::shared_ptr<const algo::VCounts> v;  // uneven collectives: their counts, for describe
  // The heartbeat period during this call: shorter than the communicator's when the
  // call's own timeout is (so that a silent peer is still found within 2x of it).
  std::chrono::milliseconds period{0};
};

// The readable signature of collective #seq: "allreduce #4 float32 x1024 sum ring"; an
// uneven one adds the counts it was called with ("... counts 3,0,5", at most 16 shown).
std::string describe(int64_t seq, const Running& r);

}  // namespace tccl
