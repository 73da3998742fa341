// The communicator's point-to-point room: its calls (send, recv, groups) over the p2p
// engine (exec/p2p.hpp), which runs on the transport's p2p lane.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exec/p2p.hpp"
#include "tccl/stats.hpp"
#include "transport/transport.hpp"

namespace tccl {

// The transport's p2p lane as the engine's link source.
class TransportP2PSource final : public P2PLinkSource {
 public:
  TransportP2PSource(Transport& t, std::function<std::string(int)> describePeer,
                     std::function<void(ErrorInfo&)> annotate)
      : transport_(t),
        describe_(std::move(describePeer)),
        annotate_(std::move(annotate)),
        events_(t.subscribeLinkEvents()) {}
  ~TransportP2PSource() override { transport_.unsubscribeLinkEvents(events_); }
  TransportP2PSource(const TransportP2PSource&) = delete;
  TransportP2PSource& operator=(const TransportP2PSource&) = delete;
  Link* link(int peer) override { return transport_.tryLink(peer); }
  void service() override {}
  std::vector<Link*> links() override { return transport_.links(Lane::P2P); }
  int serviceFd() override { return events_; }
  uint64_t linksVersion() override { return transport_.linkEventCount(); }
  std::string describePeer(int peer) override { return describe_ ? describe_(peer) : ""; }
  void annotate(ErrorInfo& info) override {
    if (annotate_) annotate_(info);
  }

 private:
  Transport& transport_;
  std::function<std::string(int)> describe_;
  std::function<void(ErrorInfo&)> annotate_;
  int events_;  // our own link-event descriptor (the transport owns it)
};

class P2PRoom {
 public:
  // describePeer: a peer's health for a timeout's message; annotate: completes every
  // error an operation fails with (the other rank numberings of a sub-communicator).
  P2PRoom(Transport& t, P2PConfig config, std::function<std::string(int)> describePeer,
          std::function<void(ErrorInfo&)> annotate);
  ~P2PRoom();

  // Posts `op`, or records it when this thread is inside a group; a blocking one is
  // then waited for (now, or by groupEnd). Returns false when it was deferred.
  bool submit(const P2PHandle& op, bool blocking);
  void groupStart();
  // Posts the group's operations as one and waits for its blocking ones.
  void groupEnd();
  bool inGroup() const;
  // Fails everything pending and later (the communicator aborted).
  void abort(const ErrorInfo& cause) { engine_->abort(cause); }
  const std::shared_ptr<P2PEngine>& engine() const { return engine_; }

 private:
  TransportP2PSource source_;
  std::shared_ptr<P2PEngine> engine_;
  // The open group: which thread opened it, how deep, and what it recorded.
  // depth_ is written under mu_ and read without it first: only the thread that opens a
  // group makes it nonzero for itself, so a thread that reads 0 has no group open and
  // posts at once (no lock on the path of every call).
  mutable std::mutex mu_;
  std::thread::id owner_;
  std::atomic<int> depth_{0};
  std::vector<P2PHandle> ops_;
  std::vector<P2PHandle> blocking_;
};

}  // namespace tccl
