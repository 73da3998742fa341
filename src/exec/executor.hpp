// The executor runs a Schedule over the transport's channels.
//
// Threading model: a blocking collective runs entirely on the caller's thread (no
// hand-off to a progress thread: the lowest latency for small messages, as in Open
// MPI's coll/tuned). Progress is a single loop over nonblocking sockets:
//   for every peer channel: push the send queue as far as the socket takes it, and
//   pull the receive queue as far as data is there, reducing each segment as soon as
//   it has landed; when nothing moved, spin briefly (TCCL_SPIN_US), then poll(2)
//   for exactly the directions that are waiting, until the call's deadline.
// Sends never wait for receives on another socket, so no send/recv ordering can
// deadlock, whatever the message size: the only waits are the schedule's own
// data dependencies (forward segment k only after receiving segment k).
//
// Memory: one staging buffer per peer channel of at most one segment, reused across
// calls; nothing proportional to the world size times the vector.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "tccl/types.hpp"
#include "transport/transport.hpp"

namespace tccl {

struct ExecContext {
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  uint8_t* scratch = nullptr;
  // The logical element offset at which each buffer starts (see algo::BufferId).
  size_t inputOrigin = 0;
  size_t outputOrigin = 0;
  size_t scratchOrigin = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int worldSize = 1;
  int rank = 0;
  // Carried in every header and checked on every message received.
  uint32_t seq = 0;
  uint32_t fingerprint = 0;
  // For error messages.
  std::string collective;
  int64_t seqFull = 0;
  Deadline deadline = Deadline::never();
  int64_t timeoutMs = -1;
  int spinMicros = 0;
};

class Executor {
 public:
  // Runs the schedule to completion or throws a tccl::Error naming the peer, phase
  // and step where it failed. The channels of every peer in schedule.peers must be
  // connected.
  void run(const algo::Schedule& schedule, const ExecContext& ctx, Transport& transport);

 private:
  std::map<int, std::vector<uint8_t>> staging_;  // per peer, one segment
};

}  // namespace tccl
