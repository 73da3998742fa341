#include "sim/replay.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <simgrid/s4u.hpp>
#include <string>

#include "sim/rank_state.hpp"
#include "tccl/error.hpp"

namespace sg4 = simgrid::s4u;

namespace tccl::sim {
namespace {

std::string mailboxName(int from, int to) {
  return std::to_string(from) + ">" + std::to_string(to);
}

// One actor per rank; a mailbox per direction of every pair pairs each put with its get;
// the actor blocks in wait_any and in execute.
class RankActor final : public detail::RankState {
 public:
  using RankState::RankState;

  void run() {
    load();
    for (const detail::Channel& ch : channels()) {
      out_.push_back(sg4::Mailbox::by_name(mailboxName(rank(), ch.peer)));
      in_.push_back(sg4::Mailbox::by_name(mailboxName(ch.peer, rank())));
    }
    sinks_.assign(channels().size(), nullptr);
    while (true) {
      progress();
      if (remaining() == 0) break;
      // Ops left and nothing in flight: a schedule that deadlocks. The actor ends
      // unfinished (replay reports it; an exception would end the whole simulation).
      if (comms_.empty()) return;
      const auto k = static_cast<size_t>(sg4::Comm::wait_any(comms_));
      const int32_t tag = tags_[k];
      comms_[k] = comms_.back();
      tags_[k] = tags_.back();
      comms_.pop_back();
      tags_.pop_back();
      if ((tag & 1) == 0) {
        sendDone(tag >> 1);
      } else {
        recvLanded(tag >> 1);
      }
    }
    markFinished(sg4::Engine::get_clock());
  }

 private:
  void startSend(int32_t c, uint64_t wireBytes) override {
    comms_.push_back(out_[static_cast<size_t>(c)]->put_async(this, wireBytes));
    tags_.push_back(c << 1);
  }
  void startRecv(int32_t c) override {
    comms_.push_back(in_[static_cast<size_t>(c)]->get_async(&sinks_[static_cast<size_t>(c)]));
    tags_.push_back((c << 1) | 1);
  }
  // Ranks sharing a host share its cores: the execute queues behind theirs.
  void cpu(double sec) override {
    sg4::this_actor::execute(sec * sg4::this_actor::get_host()->get_speed());
  }

  std::vector<sg4::Mailbox*> out_, in_;
  std::vector<void*> sinks_;  // get_async's destinations for the (meaningless) payload
  std::vector<sg4::CommPtr> comms_;
  std::vector<int32_t> tags_;  // channel << 1 | (1 for a receive)
};

void runActors(const ReplayConfig& cfg, ReplayResult& r) {
  const int n = static_cast<int>(cfg.hostOfRank.size());
  for (int rank = 0; rank < n; ++rank) {
    auto actor = std::make_shared<RankActor>(cfg, rank, &r.ranks[static_cast<size_t>(rank)]);
    sg4::Actor::create("rank-" + std::to_string(rank), cfg.hostOfRank[static_cast<size_t>(rank)],
                       [actor] { actor->run(); });
  }
  sg4::Engine::get_instance()->run();
}

}  // namespace

ReplayResult replay(const ReplayConfig& cfg) {
  const int n = static_cast<int>(cfg.hostOfRank.size());
  if (n < 1) throwError(ErrorKind::InvalidArgument, "simulate: no ranks");
  if (!(cfg.reduceBytesPerSec > 0)) {
    throwError(ErrorKind::InvalidArgument, "simulate: the reduction rate must be positive");
  }
  // The table's own checks, before any actor starts (an exception inside an actor would
  // end the simulation less politely).
  algo::BuildArgs probe;
  probe.collective = cfg.collective;
  probe.n = n;
  probe.root = algo::spec(cfg.collective).rooted ? cfg.root : -1;
  probe.algorithm = cfg.algorithm;
  probe.count = 0;
  probe.hosts = cfg.layout;
  (void)algo::build(probe);
  if (cfg.count > UINT32_MAX) {
    throwError(ErrorKind::InvalidArgument, "simulate: at most 2^32-1 elements per block");
  }

  ReplayResult r;
  r.ranks.resize(static_cast<size_t>(n));
  const double start = sg4::Engine::get_clock();
  const auto wall0 = std::chrono::steady_clock::now();
  runActors(cfg, r);
  r.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  for (size_t rank = 0; rank < r.ranks.size(); ++rank) {
    if (!r.ranks[rank].finished) {
      throwError(ErrorKind::Protocol, "simulate: rank " + std::to_string(rank) +
                                          " never finished (the schedules deadlock)");
    }
  }
  for (RankStats& s : r.ranks) {
    s.finishSec = std::max(0.0, s.finishSec - start);
    r.seconds = std::max(r.seconds, s.finishSec);
    r.messages += s.messagesSent;
  }
  return r;
}

}  // namespace tccl::sim
