// The communicator's point-to-point calls (core/p2p_room.hpp has the room they use).
#include <algorithm>

#include "base/config.hpp"
#include "core/comm_impl.hpp"
#include "core/p2p_room.hpp"
#include "tccl/communicator.hpp"

namespace tccl {

void Communicator::Impl::checkP2P(bool isSend, const void* buf, size_t count, DataType dtype,
                                  int peer, int tag) const {
  const Impl& m = *this;
  const char* name = isSend ? "send" : "recv";
  auto bad = [&](const std::string& why) { m.invalid(std::string(name) + ": " + why); };
  if (!isValid(dtype)) bad("unknown dtype " + std::to_string(static_cast<int>(dtype)));
  if (count > (size_t{1} << 62) / dataTypeSize(dtype))
    bad("count " + std::to_string(count) + " too large");
  if (count > 0 && buf == nullptr) bad("null buffer with count > 0");
  const bool anyOk = !isSend;
  if (!(anyOk && peer == kAnySource) && (peer < 0 || peer >= m.boot.size || peer == m.boot.rank)) {
    bad(std::string(isSend ? "peer " : "source ") + std::to_string(peer) +
        " must be another rank in [0, " + std::to_string(m.boot.size) + ")" +
        (anyOk ? " or kAnySource" : ""));
  }
  if (tag < 0 && !(anyOk && tag == kAnyTag)) {
    bad("tag " + std::to_string(tag) + " must be >= 0" + (anyOk ? " or kAnyTag" : ""));
  }
}

P2PRoom* Communicator::Impl::p2pRoomIfAny() {
  return p2p.published.load(std::memory_order_acquire);
}

P2PRoom& Communicator::Impl::p2pRoom() {
  // Once made, the room lives as long as the communicator: no lock after the first call.
  if (P2PRoom* room = p2pRoomIfAny()) return *room;
  std::lock_guard<std::mutex> lk(p2p.mu);
  if (!p2p.room) {
    P2PConfig c;
    c.rank = boot.rank;
    c.worldSize = boot.size;
    c.spinMicros = boot.spinMicros;
    c.adaptiveYield = boot.adaptiveYield;
    if (auto v = config::getEnvInt("TCCL_P2P_EAGER_BYTES", 0, int64_t{1} << 30))
      c.eagerBytes = static_cast<size_t>(*v);
    if (auto v = config::getEnvInt("TCCL_P2P_POOL_BYTES", 0, int64_t{1} << 34))
      c.poolBytes = static_cast<size_t>(*v);
    if (auto v = config::getEnvInt("TCCL_P2P_CHUNK_BYTES", 4096, int64_t{1} << 30))
      c.chunkBytes = static_cast<size_t>(*v);
    p2p.room = std::make_unique<P2PRoom>(
        *boot.transport, c, [this](int peer) { return describePeerHealth(peer); },
        [this](ErrorInfo& info) { nameRanks(info); });
    // A communicator aborted before its first p2p call: the room starts aborted.
    if (auto cause = currentAbortCause()) p2p.room->abort(*cause);
    p2p.published.store(p2p.room.get(), std::memory_order_release);
  }
  return *p2p.room;
}

void Communicator::Impl::prepareP2P(P2POp& op, bool isSend, const void* buf, size_t count,
                                    DataType dtype, int peer, int tag, const CollectiveOptions& o,
                                    Deadline::Clock::time_point now) {
  checkUsable();
  checkP2P(isSend, buf, count, dtype, peer, tag);
  int64_t ms = -1;
  const Deadline d = deadlineFor(o.timeout, &ms, now);
  P2PEngine::fill(op, isSend, buf, count * dataTypeSize(dtype), peer, tag, d, ms);
  op.posted = now;
}

P2PHandle Communicator::Impl::makeP2P(bool isSend, const void* buf, size_t count, DataType dtype,
                                      int peer, int tag, const CollectiveOptions& o) {
  auto op = std::make_shared<P2POp>();
  prepareP2P(*op, isSend, buf, count, dtype, peer, tag, o, Deadline::Clock::now());
  return op;
}

void Communicator::send(const void* buf, size_t count, DataType dtype, int peer, int tag,
                        const CollectiveOptions& options) {
  Impl& m = *impl_;
  auto op = m.makeP2P(true, buf, count, dtype, peer, tag, options);
  if (m.p2pRoom().submit(op, true)) m.queue.last = op->result().stats;
}

RecvStatus Communicator::recv(void* buf, size_t count, DataType dtype, int source, int tag,
                              const CollectiveOptions& options) {
  Impl& m = *impl_;
  auto op = m.makeP2P(false, buf, count, dtype, source, tag, options);
  RecvStatus st;
  if (!m.p2pRoom().submit(op, true)) return st;  // in a group: known after groupEnd
  m.queue.last = op->result().stats;
  st.source = op->result().source;
  st.tag = op->result().tag;
  st.count = op->result().bytes / dataTypeSize(dtype);
  return st;
}

namespace {
// An asynchronous send or receive: the Work and its operation in one allocation. The
// operation's handle shares the Work's ownership (an aliasing pointer), so the engine
// keeps both alive while it holds the operation, and the caller does through the Work.
// Neither the completion nor the driver holds a pointer that owns (no cycle): each is
// called by someone who holds the whole already.
struct P2PWork final : Work, std::enable_shared_from_this<P2PWork> {
  P2PWork(bool isSend, int rank) : Work(isSend ? "send" : "recv", -1, rank) {}
  P2POp op;
  std::weak_ptr<P2PEngine> engine;
};
}  // namespace

WorkPtr Communicator::Impl::p2pWork(bool isSend, const void* buf, size_t count, DataType dtype,
                                    int peer, int tag, const CollectiveOptions& options) {
  Impl& m = *this;
  auto work = std::make_shared<P2PWork>(isSend, m.boot.rank);
  // One clock read at issue (the deadline, the op's and the Work's start) and one at
  // completion (the engine's).
  const auto now = Deadline::Clock::now();
  m.prepareP2P(work->op, isSend, buf, count, dtype, peer, tag, options, now);
  P2PWork* self = work.get();
  work->op.onDone = [self](P2PResult&& r, std::exception_ptr e) {
    self->complete(std::move(r.stats), std::move(e), r.source, r.tag, r.ended);
  };
  work->setStarted(now);
  P2PRoom& room = m.p2pRoom();
  work->engine = room.engine();
  // Called by Work::wait() on a Work its caller holds: the op lives as long.
  work->setDriver([self] {
    auto e = self->engine.lock();
    if (!e) return;
    try {
      e->wait(P2PHandle(self->shared_from_this(), &self->op));
    } catch (...) {
      // wait() rethrows it from the Work
    }
  });
  room.submit(P2PHandle(work, &work->op), false);
  return work;
}

WorkPtr Communicator::sendAsync(const void* buf, size_t count, DataType dtype, int peer, int tag,
                                const CollectiveOptions& options) {
  return impl_->p2pWork(true, buf, count, dtype, peer, tag, options);
}

WorkPtr Communicator::recvAsync(void* buf, size_t count, DataType dtype, int source, int tag,
                                const CollectiveOptions& options) {
  return impl_->p2pWork(false, buf, count, dtype, source, tag, options);
}

void Communicator::groupStart() { impl_->p2pRoom().groupStart(); }
void Communicator::groupEnd() { impl_->p2pRoom().groupEnd(); }

}  // namespace tccl
