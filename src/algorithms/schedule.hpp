// Schedules are data: an algorithm is a function (rank, world, count, segment) ->
// Schedule, a list of sends and receives over element ranges. No sockets here. The
// same schedule is run by the executor (src/exec), summed for byte accounting, and
// read by error messages ("ring reduce-scatter step 3/7").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/chunking.hpp"

namespace tccl::algo {

// The buffers a schedule names. Ranges are element offsets in a collective's logical
// vector; the executor maps them onto each buffer through that buffer's origin (for
// example a reduce-scatter's output holds only block r, so its origin is r*count).
// Scratch is temporary space the communicator provides when a schedule needs it.
enum class BufferId : uint8_t { Input, Output, Scratch };
// Send and Recv move a range to or from `peer`. Copy is local (peer -1): dst[range] =
// buffer[range], then (finalize) Avg's division; a schedule states its local copies
// and world-size-1 results this way (collective_spec.cpp's build adds them), so the
// communicator copies nothing itself. A Copy whose source and destination resolve to
// the same address (in place) copies nothing, but still divides when it finalizes.
enum class OpType : uint8_t { Send, Recv, Copy };
enum class RecvAction : uint8_t {
  Copy,    // the payload lands directly in dst[range]
  Reduce,  // dst[range] = operand[range] op payload, operand = `buffer`
};

struct Op {
  OpType type = OpType::Send;
  int peer = -1;
  uint32_t step = 0;                  // global step number, carried in the message header
  Range range;                        // elements
  BufferId buffer = BufferId::Input;  // Send: the source. Recv+Reduce: the operand.
  BufferId dst = BufferId::Output;    // Recv: where the payload or the result goes.
  RecvAction action = RecvAction::Copy;
  // Index of an op that must complete first. A send does not start before it; a
  // receive may land its payload but does not apply its action before it.
  int32_t dependsOn = -1;
  bool thenSelf = false;  // after the action: dst[range] = dst[range] op Input[range]
  bool finalize = false;  // after everything: the range is final (Avg divides here)
  // A count message (the uneven collectives' agreement check, docs/algorithms.md,
  // "Uneven collectives"): the payload is `value` as 8 little-endian bytes instead of a
  // buffer range (range, buffer and dst are unused). A Send sends value; a Recv fails
  // with a Mismatch naming both ranks unless the peer's value equals its own, before
  // any data of the pair lands (the peer's data follows on the same connection).
  bool countMsg = false;
  uint64_t value = 0;
};

// Payload bytes of one count message.
inline constexpr size_t kCountMsgBytes = 8;

struct Phase {
  std::string name;  // "reduce-scatter"
  uint32_t firstStep = 0;
  uint32_t steps = 0;
};

struct Schedule {
  std::string algorithm;
  std::vector<Op> ops;
  std::vector<Phase> phases;
  std::vector<int> peers;  // distinct peers, ascending
  // Elements of scratch space the schedule needs (0: none).
  size_t scratchElems = 0;

  // Payload bytes this rank sends / receives when the schedule runs (count messages:
  // kCountMsgBytes each).
  uint64_t bytesSent(size_t elemSize) const;
  uint64_t bytesReceived(size_t elemSize) const;
  // Largest receive range in elements (the executor's staging size; count messages
  // land elsewhere).
  size_t maxRecvElems() const;
  // The phase a global step belongs to (nullptr if none).
  const Phase* phaseOf(uint32_t step) const;
};

// ---- builders every schedule uses -----------------------------------------------------
// Each appends one op and returns its index (for dependsOn).
int32_t addSend(Schedule& s, int peer, uint32_t step, Range range, BufferId from,
                int32_t dependsOn = -1);
int32_t addRecv(Schedule& s, int peer, uint32_t step, Range range, RecvAction action,
                BufferId operand, BufferId dst, int32_t dependsOn = -1, bool finalize = false);
// Count messages (Op::countMsg): `count` elements go from this rank to `peer` / this
// rank expects `count` elements from `peer`.
int32_t addCountSend(Schedule& s, int peer, uint32_t step, uint64_t count);
int32_t addCountRecv(Schedule& s, int peer, uint32_t step, uint64_t count);
// A local copy dst[range] = from[range] (see OpType::Copy).
int32_t addLocalCopy(Schedule& s, Range range, BufferId from, BufferId into, int32_t dependsOn = -1,
                     bool finalize = false);
inline int32_t addRecvCopy(Schedule& s, int peer, uint32_t step, Range range, BufferId into,
                           int32_t dependsOn = -1) {
  return addRecv(s, peer, step, range, RecvAction::Copy, BufferId::Input, into, dependsOn);
}
// Sets s.peers to the distinct peers of s.ops, ascending.
void collectPeers(Schedule& s);
// Reorders s.ops by wave[i], the wave of op i (stable within a wave), and renumbers
// their dependsOn; every op must depend on an op that ends up before it. The executor
// keeps a FIFO per peer and direction, so this is the order of the messages on each
// connection: both ends of a connection must order by the same rule.
void orderByWave(Schedule& s, const std::vector<uint32_t>& wave);

// Ring all-reduce: reduce-scatter (n-1 steps) then all-gather (n-1 steps), each
// chunk cut into segments of segElems elements that flow around the ring
// independently (segment k of step s+1 is sent as soon as segment k of step s has
// been received and reduced). Messages go step by step (all of step s's segments,
// then step s+1's), except at n = 2 with at least kRingWaveMinBytes of data (or an
// unknown element size, elemSize 0), where segment k's all-gather send follows its
// reduce-scatter send (docs/algorithms.md, "Ring: message order").
inline constexpr size_t kRingWaveMinBytes = size_t{32} << 20;
Schedule ringAllreduce(int rank, int n, size_t count, size_t segElems, size_t elemSize = 0);

// Naive all-reduce: every rank sends its whole input to every other rank and reduces
// locally, in rank order (x0 op x1 op ... op x(n-1)), so that every rank computes
// bitwise the same result. Requires Input and Output to be distinct buffers.
Schedule naiveAllreduce(int rank, int n, size_t count, size_t segElems);

}  // namespace tccl::algo
