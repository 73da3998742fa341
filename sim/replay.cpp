#include "sim/replay.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <simgrid/s4u.hpp>
#include <string>
#include <unordered_map>
#include <utility>

#include "sim/rank_state.hpp"
#include "tccl/error.hpp"

namespace sg4 = simgrid::s4u;

namespace tccl::sim {
namespace {

std::string mailboxName(int from, int to) {
  return std::to_string(from) + ">" + std::to_string(to);
}

class RankActor;

// A comm's two ends, for the completion callback: the actor and the tag it filed it under.
struct End {
  RankActor* actor = nullptr;
  int32_t tag = -1;
};
struct Ends {
  End send, recv;
};

// What the completion callback needs of the replay that is running (one at a time).
struct Completions {
  std::unordered_map<const void*, Ends> live;  // a started comm's CommImpl -> its ends
  uint64_t blocks = 0;                         // counts the actors' blocking waits
};
Completions* gCompletions = nullptr;

// At most this many live comms, an actor waits in wait_any as it always did; past it, on
// its semaphore (why: runActors).
constexpr size_t kWaitAnyMax = 16;

// One actor per rank; a mailbox per direction of every pair pairs each put with its get;
// the actor blocks in wait_any (or on its semaphore) and in execute.
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
    posOfTag_.assign(2 * channels().size(), -1);
    while (true) {
      progress();
      if (remaining() == 0) break;
      // Ops left and nothing in flight: a schedule that deadlocks. The actor ends
      // unfinished (replay reports it; an exception would end the whole simulation).
      if (comms_.empty()) return;
      const size_t k = next();
      const int32_t tag = tags_[k];
      take(k);
      if ((tag & 1) == 0) {
        sendDone(tag >> 1);
      } else {
        recvLanded(tag >> 1);
      }
    }
    markFinished(sg4::Engine::get_clock());
    // The comms completed but not waited on, so that SimGrid lets go of them; they
    // return at once, and this actor does nothing after.
    for (const sg4::CommPtr& c : unwaited_) c->wait();
  }

  // In the kernel, as the comm filed under `tag` completes (CommImpl::finish, before it
  // answers the actors waiting on it).
  void landed(int32_t tag) { done_.insert(posOfTag_[static_cast<size_t>(tag)]); }
  bool blocked() const { return blocked_; }
  uint64_t blockedSince() const { return blockedSince_; }
  void wake(int32_t tag) {
    blocked_ = false;
    wokenBy_ = tag;
    sem_->release();
  }

 private:
  // The index in comms_ of the comm that wait_any(comms_) would return: the first
  // completed one in comms_'s order if any has, else the first to complete.
  size_t next() {
    size_t k = 0;
    if (comms_.size() <= kWaitAnyMax) {
      k = static_cast<size_t>(sg4::Comm::wait_any(comms_));
    } else {
      if (done_.empty()) {
        blocked_ = true;
        blockedSince_ = ++gCompletions->blocks;
        sem_->acquire();
        k = static_cast<size_t>(posOfTag_[static_cast<size_t>(wokenBy_)]);
        // Woken as wait_any would have been; a wait here would be one more simcall, and
        // the actors' order within the instant would move (the predictions with it).
        unwaited_.push_back(comms_[k]);
      } else {
        // Completed already: this returns at once, as wait_any would, and SimGrid lets
        // go of the comm (takes it off this actor's list of activities).
        k = static_cast<size_t>(*done_.begin());
        comms_[k]->wait();
      }
    }
    done_.erase(static_cast<int32_t>(k));
    return k;
  }
  // Drops comms_[k] as before: the last one takes its place.
  void take(size_t k) {
    const size_t last = comms_.size() - 1;
    posOfTag_[static_cast<size_t>(tags_[k])] = -1;
    if (k != last) {
      comms_[k] = comms_[last];
      tags_[k] = tags_[last];
      posOfTag_[static_cast<size_t>(tags_[k])] = static_cast<int32_t>(k);
      if (done_.erase(static_cast<int32_t>(last)) != 0) done_.insert(static_cast<int32_t>(k));
    }
    comms_.pop_back();
    tags_.pop_back();
  }
  void file(sg4::CommPtr comm, int32_t tag, End Ends::*side) {
    posOfTag_[static_cast<size_t>(tag)] = static_cast<int32_t>(comms_.size());
    gCompletions->live[comm->get_impl()].*side = End{this, tag};
    comms_.push_back(std::move(comm));
    tags_.push_back(tag);
  }
  void startSend(int32_t c, uint64_t wireBytes) override {
    file(out_[static_cast<size_t>(c)]->put_async(this, wireBytes), c << 1, &Ends::send);
  }
  void startRecv(int32_t c) override {
    file(in_[static_cast<size_t>(c)]->get_async(&sinks_[static_cast<size_t>(c)]), (c << 1) | 1,
         &Ends::recv);
  }
  // Ranks sharing a host share its cores: the execute queues behind theirs.
  void cpu(double sec) override {
    sg4::this_actor::execute(sec * sg4::this_actor::get_host()->get_speed());
  }

  std::vector<sg4::Mailbox*> out_, in_;
  std::vector<void*> sinks_;  // get_async's destinations for the (meaningless) payload
  std::vector<sg4::CommPtr> comms_;
  std::vector<int32_t> tags_;           // channel << 1 | (1 for a receive)
  std::vector<int32_t> posOfTag_;       // tag -> its index in comms_ (-1: none live)
  std::set<int32_t> done_;              // indices in comms_ of the completed comms
  std::vector<sg4::CommPtr> unwaited_;  // completed, taken, not waited on
  sg4::SemaphorePtr sem_ = sg4::Semaphore::create(0);
  bool blocked_ = false;
  uint64_t blockedSince_ = 0;
  int32_t wokenBy_ = -1;
};

// SimGrid calls this (the data copy of a completed comm) in the kernel at the instant it
// would answer the actors waiting on the comm: it marks the comm completed at both ends
// and wakes those blocked on their semaphore, the earliest blocked first (wait_any
// answers in the order the waits were posted).
void commCompleted(simgrid::kernel::activity::CommImpl* impl, void* /*buff*/, size_t /*size*/) {
  const auto it = gCompletions->live.find(impl);
  if (it == gCompletions->live.end()) return;
  const Ends e = it->second;
  gCompletions->live.erase(it);
  e.send.actor->landed(e.send.tag);
  e.recv.actor->landed(e.recv.tag);
  const End* first = &e.send;
  const End* second = &e.recv;
  if (second->actor->blocked() &&
      (!first->actor->blocked() || second->actor->blockedSince() < first->actor->blockedSince()))
    std::swap(first, second);
  if (first->actor->blocked()) first->actor->wake(first->tag);
  if (second->actor->blocked()) second->actor->wake(second->tag);
}

// wait_any(comms) costs O(comms) per call: SimGrid 3.32 files the waiting actor on each of
// them and takes it off again. An actor with many live comms (naive: 2(N-1)) instead
// learns of each completion from commCompleted, which SimGrid calls as the comm completes,
// and waits on its own semaphore; it then picks the comm wait_any would have returned and
// waits on that one alone.
void runActors(const ReplayConfig& cfg, ReplayResult& r) {
  const int n = static_cast<int>(cfg.hostOfRank.size());
  Completions completions;
  gCompletions = &completions;
  sg4::Engine::get_instance()->set_default_comm_data_copy_callback(commCompleted);
  for (int rank = 0; rank < n; ++rank) {
    auto actor = std::make_shared<RankActor>(cfg, rank, &r.ranks[static_cast<size_t>(rank)]);
    sg4::Actor::create("rank-" + std::to_string(rank), cfg.hostOfRank[static_cast<size_t>(rank)],
                       [actor] { actor->run(); });
  }
  sg4::Engine::get_instance()->run();
  sg4::Engine::get_instance()->set_default_comm_data_copy_callback(
      sg4::Comm::copy_pointer_callback);
  gCompletions = nullptr;
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
