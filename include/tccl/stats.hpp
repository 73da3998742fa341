// Byte counters, taken from what send(2)/recv(2) actually returned.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tccl {

// Counters for one direction pair with one peer.
//   payload*: bytes of collective data (message bodies only).
//   wire*:    every byte this process wrote to / read from the peer's socket:
//             payload + message headers + handshake.
struct PeerCounters {
  uint64_t payloadSent = 0;
  uint64_t payloadRecv = 0;
  uint64_t wireSent = 0;
  uint64_t wireRecv = 0;
  uint64_t messagesSent = 0;
  uint64_t messagesRecv = 0;

  PeerCounters& operator+=(const PeerCounters& o);
  PeerCounters operator-(const PeerCounters& o) const;
};

struct CommStats {
  std::map<int, PeerCounters> perPeer;  // keyed by peer rank
  PeerCounters total() const;
};

// What the last collective call did.
struct CallStats {
  std::string collective;  // "allreduce"
  std::string algorithm;   // the algorithm that actually ran ("ring", "naive")
  int64_t seq = -1;
  uint64_t count = 0;
  uint64_t bytes = 0;  // count * element size (V)
  // The pipeline segment its schedule was cut into (TCCL_SEGMENT_BYTES or
  // CommOptions::segmentBytes if set, else for an all-reduce the cost model's).
  uint64_t segmentBytes = 0;
  double seconds = 0;  // wall time of the call on this rank
  CommStats traffic;   // counters for this call only
};

}  // namespace tccl
