// What one rank of a replay does with its schedule (replay.hpp's rules), apart from how
// it waits: replay.cpp's RankActor supplies the three effects (start a send, post a
// receive, spend CPU) with SimGrid's mailboxes and execute, and waits in wait_any (or,
// with many comms in flight, on a semaphore that their completions release).
// (A driver with no actors, advanced from SimGrid's activity-completion signal, was tried
// and was slower: docs/simulate.md, "How far it goes".)
#pragma once

#include <cstdint>
#include <vector>

#include "sim/replay.hpp"

namespace tccl::sim::detail {

// An op as the replay needs it: 16 bytes, so that 4,096 ranks of ring steps (33 M ops)
// fit in memory together.
struct SimOp {
  int32_t peer = -1;
  int32_t dependsOn = -1;
  uint32_t elems = 0;
  algo::OpType type = algo::OpType::Send;
  uint8_t reducePasses = 0;  // Recv: 1 for a Reduce action, +1 for thenSelf
};

// One peer's two FIFOs (op indices in schedule order) and what is in flight on them.
struct Channel {
  int peer = -1;
  std::vector<int32_t> sends, recvs;
  size_t sendHead = 0, recvHead = 0;
  bool sending = false, receiving = false, landed = false, dirty = false;
};

class RankState {
 public:
  RankState(const ReplayConfig& cfg, int rank, RankStats* stats)
      : cfg_(cfg), rank_(rank), stats_(stats) {}
  RankState(const RankState&) = delete;
  RankState& operator=(const RankState&) = delete;
  virtual ~RankState() = default;

  // Builds this rank's schedule with the table's builder and keeps only what the replay
  // needs; every channel starts dirty.
  void load();
  // Services the dirty channels and the copies until nothing is left to do at this
  // instant.
  void progress();
  // A comm of channel c has completed: its send, or its receive's payload landed.
  void sendDone(int32_t c);
  void recvLanded(int32_t c);
  // Records that the rank's last op completed at `now` (remaining() is 0).
  void markFinished(double now);

  size_t remaining() const { return remaining_; }
  int rank() const { return rank_; }
  const std::vector<Channel>& channels() const { return chans_; }

 protected:
  // Starts the send at the head of channel c's send FIFO: wireBytes with the header.
  virtual void startSend(int32_t c, uint64_t wireBytes) = 0;
  // Posts the receive at the head of channel c's receive FIFO.
  virtual void startRecv(int32_t c) = 0;
  // `sec` of one idle core of this rank's host; returns when they are spent.
  virtual void cpu(double sec) = 0;

 private:
  void service(int32_t c);
  bool ready(int32_t i) const {
    const int32_t d = ops_[static_cast<size_t>(i)].dependsOn;
    return d < 0 || done_[static_cast<size_t>(d)] != 0;
  }
  void markDirty(int32_t c);
  void complete(int32_t i);
  void postSend(int32_t c);
  void applyRecv(int32_t c);
  void runCopies();
  uint64_t bytes(const SimOp& o) const { return uint64_t{o.elems} * cfg_.elemSize; }

  const ReplayConfig& cfg_;
  const int rank_;
  RankStats* stats_;
  std::vector<SimOp> ops_;
  std::vector<Channel> chans_;
  std::vector<int32_t> chanOfOp_, copies_, dependents_, dirty_;
  std::vector<uint32_t> depStart_;
  std::vector<uint8_t> done_;
  size_t remaining_ = 0;
};

}  // namespace tccl::sim::detail
