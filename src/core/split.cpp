// Sub-communicators (docs/architecture.md, "Sub-communicators"): split, and the attached
// construction that split and shrink share.
//
// A child shares its family's store (its own namespace in it), listener and service thread
// (the hub transport routes a connection to the child by the communicator id of its Hello,
// docs/protocol.md), heartbeat thread and job id. What it does not share is what makes it a
// communicator of its own: its connections (opened lazily, like any communicator's), its
// sequence numbers and fingerprints, its call queue and its failure state. So parent and
// children run concurrently, each in its own total order, and a failure in a child aborts
// the child alone.
//
// Why not multiplex the parent's connections: a link has one owner at a time, the thread
// running that communicator's call (no locks on the I/O path). Parent and child calls run
// at once on different threads, so sharing a socket would need a demultiplexing reader
// between them and a lock per frame; a child's own connections cost one TCP handshake per
// peer it talks to, paid once, through the one listener.
#include <algorithm>
#include <numeric>

#include "base/config.hpp"
#include "base/log.hpp"
#include "core/bootstrap.hpp"
#include "core/comm_impl.hpp"
#include "transport/wire.hpp"

namespace tccl {

std::unique_ptr<Communicator::Impl> Communicator::Impl::attachChild(
    const std::string& name, const std::vector<int>& members, int newRank,
    std::optional<std::chrono::milliseconds> timeout) const {
  auto c = std::make_unique<Impl>();
  Boot& b = c->boot;
  const Boot& p = boot;
  const int size = static_cast<int>(members.size());
  // The parent's settings, as read at its construction (the environment is not read
  // again: a child behaves like its parent).
  b.userStore = p.userStore;
  b.rank = newRank;
  b.size = size;
  b.options = p.options;
  b.options.name = name;
  b.timeout = timeout.value_or(p.timeout);
  if (timeout) b.options.timeout = *timeout;
  b.segmentBytes = p.segmentBytes;
  b.segmentFixed = p.segmentFixed;
  b.spinMicros = p.spinMicros;
  b.adaptiveYield = p.adaptiveYield;  // the world's, not this child's size: its ranks share hosts
  b.envAlgorithm = p.envAlgorithm;
  b.model = p.model;
  b.jobId = p.jobId;
  b.store = std::make_shared<PrefixStore>("tccl/" + name, p.userStore);
  b.ownedServer = p.ownedServer;  // the store must outlive every member of the family
  b.sub = true;
  b.originalRanks.resize(members.size());
  std::iota(b.originalRanks.begin(), b.originalRanks.end(), 0);
  b.parentRanks = members;
  b.worldRanks.resize(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    b.worldRanks[i] = p.worldRanks[static_cast<size_t>(members[i])];
  }
  TransportConfig tc;
  tc.rank = newRank;
  tc.worldSize = size;
  tc.jobId = b.jobId;
  tc.commId = wire::hash64(name);
  bootstrap::configureBuffers(tc);
  bootstrap::configureStriping(tc, b.model, b.segmentBytes);
  b.hub = p.hub;
  b.transport = std::make_shared<Transport>(tc, b.store, p.hub);
  b.topology =
      std::make_unique<Topology>(b.store, newRank, size, b.transport->listenAddress(), b.timeout);
  b.joined = true;
  c->startFailureWatch(failure.hbHub, failure.hbRaw);
  TCCL_INFO("sub-communicator '" << name << "' rank " << newRank << "/" << size << " (parent rank "
                                 << p.rank << ", world rank "
                                 << p.worldRanks[static_cast<size_t>(p.rank)] << ")");
  return c;
}

void Communicator::Impl::nameRanks(ErrorInfo& info) const {
  if (!boot.sub) return;
  auto also = [&](int r) {
    ErrorInfo::OtherNumbering n;
    if (r >= 0 && r < boot.size) {
      n.parent = boot.parentRanks[static_cast<size_t>(r)];
      n.world = boot.worldRanks[static_cast<size_t>(r)];
    }
    return n;
  };
  // Errors are built with this communicator's rank; one quoted from another rank (an
  // agreed cause) names that rank's numbering only for its culprit.
  info.rankAlso = also(info.rank);
  info.peerAlso = also(info.peer);
  info.culpritAlso = also(info.culprit);
}

std::optional<Communicator> Communicator::split(int color, int key) {
  Impl& m = *impl_;
  m.checkUsable();
  const int n = m.boot.splits++;
  // Every rank's (color, key), in this communicator's order: a collective like any other,
  // so a rank that never calls split fails it with the usual Timeout naming that rank.
  std::vector<int64_t> mine{color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(m.boot.size));
  allGather(mine.data(), all.data(), 2, DataType::Int64);
  auto colorOf = [&](int r) { return all[2 * static_cast<size_t>(r)]; };
  auto keyOf = [&](int r) { return all[2 * static_cast<size_t>(r) + 1]; };
  for (int r = 0; r < m.boot.size; ++r) {
    if (colorOf(r) < 0 && colorOf(r) != kNoColor) {
      // Every rank saw the same table: every rank throws the same error (no one waits).
      m.invalid("split: rank " + std::to_string(r) + " passed color " + std::to_string(colorOf(r)) +
                " (a color is >= 0, or Communicator::kNoColor to join no child)");
    }
  }
  if (color == kNoColor) return std::nullopt;
  std::vector<int> members;
  for (int r = 0; r < m.boot.size; ++r) {
    if (colorOf(r) == color) members.push_back(r);
  }
  // MPI_Comm_split: by key, ties by the rank here.
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return keyOf(a) < keyOf(b); });
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), m.boot.rank) - members.begin());
  const std::string name =
      m.boot.options.name + ".split" + std::to_string(n) + ".c" + std::to_string(color);
  return Communicator(m.attachChild(name, members, newRank));
}

std::optional<Communicator> Communicator::createGroup(
    const std::vector<int>& ranks, const std::string& tag,
    std::optional<std::chrono::milliseconds> timeout) {
  Impl& m = *impl_;
  m.checkUsable();
  if (ranks.empty()) m.invalid("createGroup: no ranks");
  if (tag.empty()) m.invalid("createGroup: an empty tag");
  if (timeout) {
    config::checkTimeout("createGroup: a timeout of " + std::to_string(timeout->count()) + " ms",
                         timeout->count(), m.boot.rank);
  }
  std::vector<bool> seen(static_cast<size_t>(m.boot.size), false);
  for (int r : ranks) {
    if (r < 0 || r >= m.boot.size) {
      m.invalid("createGroup: rank " + std::to_string(r) + " is not in [0, " +
                std::to_string(m.boot.size) + ")");
    }
    if (seen[static_cast<size_t>(r)]) {
      m.invalid("createGroup: rank " + std::to_string(r) + " is listed twice");
    }
    seen[static_cast<size_t>(r)] = true;
  }
  auto me = std::find(ranks.begin(), ranks.end(), m.boot.rank);
  if (me == ranks.end()) return std::nullopt;
  auto child = m.attachChild(m.boot.options.name + ".group." + tag, ranks,
                             static_cast<int>(me - ranks.begin()), timeout);
  return Communicator(std::move(child));
}

const std::vector<int>& Communicator::parentRanks() const { return impl_->boot.parentRanks; }
const std::vector<int>& Communicator::worldRanks() const { return impl_->boot.worldRanks; }
size_t Communicator::attachedCommunicators() const { return impl_->boot.hub->attachedChildren(); }

}  // namespace tccl
