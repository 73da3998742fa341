// What one call of a Communicator is, as its rooms pass it along (core/comm_impl.hpp):
// the public calls fill a PreparedCall, validation checks it, the call queue numbers and
// runs it, and the failure protocol describes what a rank ran (Running) in its
// heartbeats and signatures.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "tccl/types.hpp"

namespace tccl {

enum class CallKind : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Reduce,
  Barrier,
  AllToAll,
  Gather,
  Scatter,
};

// "allreduce", "reduce_scatter", ... (as errors, logs and stats name them).
const char* kindName(CallKind k);
// The collectives that take a reduction op.
inline bool reduces(CallKind k) {
  return k == CallKind::AllReduce || k == CallKind::ReduceScatter || k == CallKind::Reduce;
}
// The collectives with a root.
inline bool rooted(CallKind k) {
  return k == CallKind::Broadcast || k == CallKind::Reduce || k == CallKind::Gather ||
         k == CallKind::Scatter;
}

// A call that passed validation and has its place in the issue order.
struct PreparedCall {
  CallKind kind = CallKind::AllReduce;
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  size_t count = 0;  // per rank (see each collective's convention)
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;  // root, or the peer of a send/recv
  Algorithm algorithm = Algorithm::Ring;
  std::string why = "requested";
  std::optional<std::chrono::milliseconds> timeout;
  int64_t seq = -1;  // collectives: the communicator's sequence; p2p: per peer and direction
};

// What a rank is running now, for its heartbeat record (formatted by that thread).
struct Running {
  CallKind kind = CallKind::AllReduce;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;
  Algorithm algorithm = Algorithm::Ring;
  uint32_t fingerprint = 0;
  // The heartbeat period during this call: shorter than the communicator's when the
  // call's own timeout is (so that a silent peer is still found within 2x of it).
  std::chrono::milliseconds period{0};
};

// The readable signature of collective #seq: "allreduce #4 float32 x1024 sum ring".
std::string describe(int64_t seq, const Running& r);

}  // namespace tccl
