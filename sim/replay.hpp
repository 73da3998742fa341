// Replays a collective's real schedules (algorithms/collective_spec.hpp: the builders the
// executor runs) as SimGrid actors, one per rank, on the hosts of a placement.
//
// What an actor does is what src/exec/executor.cpp does with the same ops:
//   - one FIFO per peer and direction, one message in flight on each (a TCP stream): a
//     send starts when its dependsOn has completed and the previous send to that peer
//     has finished; a receive is posted when the previous one from that peer has had
//     its action applied (the executor's single staging buffer per peer);
//   - a receive's payload may land before its dependsOn, but its action (reduce) waits;
//   - a reduction costs its bytes / reduceBytesPerSec of one core of the rank's host
//     (s4u execute: ranks sharing a host share its cores), twice with thenSelf;
//   - a send first costs messageOverheadSec + bytes / copyBytesPerSec of CPU (same core
//     model);
//   - local copies cost nothing (they are memcpy, next to the network's time);
//   - every message carries the wire header (kHeaderBytes) besides its payload.
// SimGrid does the rest: mailboxes pair each send with its receive, links share their
// bandwidth among the flows that cross them (max-min fairness), latencies add up along
// the route. There is no event loop here. The rules are in rank_state.hpp, the SimGrid
// side (actors, mailboxes, wait_any or a semaphore, execute) in replay.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/collective_spec.hpp"

namespace simgrid::s4u {
class Host;
}

namespace tccl::sim {

// transport/wire.hpp's kHeaderSize (a test checks they agree; sim/ does not stand on
// the transport layer).
inline constexpr uint64_t kHeaderBytes = 24;

struct ReplayConfig {
  algo::Collective collective = algo::Collective::AllReduce;
  Algorithm algorithm = Algorithm::Ring;  // not Auto: the caller resolves it
  size_t count = 0;                       // elements per block, as a call passes it
  size_t elemSize = 4;
  size_t segElems = 1;
  int root = 0;
  double reduceBytesPerSec = 20e9;  // one core's local reduction rate
  // CPU time a rank spends on each message it sends (system calls, framing), on one core
  // of its host before the message leaves: the software part of alpha that a link's
  // latency does not hold (0: none). Calibrated for loopback in docs/simulate.md.
  double messageOverheadSec = 0;
  // CPU cost per byte sent, on the sender's core (0: none): TCP over loopback is bound by
  // the kernel's copies, which run on the cores the ranks share, not by a link. Set it
  // with a fast loopback link to model ranks of one host as CPU bound.
  double copyBytesPerSec = 0;
  const algo::HostLayout* layout = nullptr;
  std::vector<simgrid::s4u::Host*> hostOfRank;  // its size is the world size
};

struct RankStats {
  uint64_t bytesSent = 0;  // payload, without headers
  uint64_t bytesReceived = 0;
  uint64_t messagesSent = 0;
  uint64_t bytesReduced = 0;
  double finishSec = 0;  // simulated time at which the rank's last op completed
  bool finished = false;
};

struct ReplayResult {
  double seconds = 0;  // simulated: from the common start to the last rank's end
  std::vector<RankStats> ranks;
  uint64_t messages = 0;
  double wallSeconds = 0;  // how long the simulation took to run, here
};

// Runs one collective to completion on the process's engine (the platform loaded
// already). Throws InvalidArgumentError for arguments the collective's table refuses
// and Error (Protocol) when the simulation ends with ranks still waiting (a schedule
// that deadlocks: never for the table's builders).
ReplayResult replay(const ReplayConfig& cfg);

}  // namespace tccl::sim
