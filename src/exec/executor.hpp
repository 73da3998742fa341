// The executor runs a Schedule over links (transport/link.hpp): the transport's TCP
// links of the collectives' lane, or in-memory links in unit tests. It never touches a
// socket; framing and byte counting are TxFrame's and RxFrame's.
//
// Threading model: a blocking collective runs entirely on the caller's thread (no
// hand-off to a progress thread: the lowest latency for small messages, as in Open
// MPI's coll/tuned). Progress is a single loop over nonblocking links:
//   run the local copies whose dependency is done; for every peer link: push the send
//   queue as far as the link takes it (one writev per message chunk, header and
//   payload together), and pull the receive queue as far as data is there (one readv
//   takes header and payload, the schedule knowing the size), reducing each segment
//   as soon as it has landed; when nothing moved, spin briefly (TCCL_SPIN_US), then
//   wait (waitLinks: poll(2)) for exactly the directions that are waiting, until the
//   call's deadline.
// Sends never wait for receives on another socket, so no send/recv ordering can
// deadlock, whatever the message size: the only waits are the schedule's own
// data dependencies (forward segment k only after receiving segment k).
//
// Memory: one staging buffer per peer link of at most one segment, reused across
// calls; nothing proportional to the world size times the vector.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/schedule.hpp"
#include "tccl/types.hpp"
#include "transport/link.hpp"

namespace tccl {

// A fault to inject (TCCL_FAULT, for tests and `tccl faults`): at the first op of
// the given phase step, the process exits, stops itself, hangs, or stalls for a while
// and goes on (a slow rank).
struct FaultSpec {
  enum class Action { Exit, Stop, Hang, Slow } action = Action::Exit;
  int64_t slowMs = 0;  // Slow: how long the step stalls before going on
  std::string phase;   // a prefix of the phase name; "start": on entering the call
  int step = 1;        // 1-based within the phase
  int64_t seq = -1;    // the collective it applies to; -1: the first with that phase
  // Parses "exit@reduce-scatter:3#2" or "slow500@broadcast:2#1"; nullopt (and *error
  // set) when malformed.
  static std::optional<FaultSpec> parse(const std::string& s, std::string* error);
};

// The start of the message of a count message's disagreement (uneven collectives): the
// failure protocol keeps such a message as it is, since it names both ranks already.
inline constexpr std::string_view kCountsDisagree = "counts disagree: ";

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
  // The spin may stop yielding after a slow yield (exec/spin.hpp, adaptiveYieldFor).
  bool adaptiveYield = false;
  // Another thread aborted the communicator: it sets *abortFlag and makes wakeFd
  // readable, which interrupts the wait.
  int wakeFd = -1;
  const std::atomic<bool>* abortFlag = nullptr;
  // Peers connected but outside this schedule: watched for end-of-file, abort
  // messages and messages of this very collective (a schedule disagreement). A view of
  // the caller's list, which outlives the run (the communicator's, kept between calls:
  // no copy per call).
  std::span<const int> watchPeers;
  const FaultSpec* fault = nullptr;  // non-null only when it may fire in this call
};

class Executor {
 public:
  // Runs the schedule to completion or throws a tccl::Error naming the peer, phase
  // and step where it failed. `links` must have a link to every peer in
  // schedule.peers and ctx.watchPeers. Local copies (OpType::Copy) run as soon as
  // their dependency is done.
  void run(const algo::Schedule& schedule, const ExecContext& ctx, LinkProvider& links);

 private:
  std::map<int, std::vector<uint8_t>> staging_;  // per peer, one segment
};

}  // namespace tccl
