#include "core/p2p_room.hpp"

#include "tccl/error.hpp"

namespace tccl {

P2PRoom::P2PRoom(Transport& t, P2PConfig config, std::function<std::string(int)> describePeer,
                 std::function<void(ErrorInfo&)> annotate)
    : source_(t, std::move(describePeer), std::move(annotate)),
      engine_(std::make_shared<P2PEngine>(std::move(config), source_)) {}

P2PRoom::~P2PRoom() = default;

bool P2PRoom::inGroup() const {
  if (depth_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return depth_ > 0 && owner_ == std::this_thread::get_id();
}

bool P2PRoom::submit(const P2PHandle& op, bool blocking) {
  if (depth_.load(std::memory_order_relaxed) > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    if (depth_ > 0 && owner_ == std::this_thread::get_id()) {
      ops_.push_back(op);
      if (blocking) blocking_.push_back(op);
      return false;
    }
  }
  if (blocking) {
    const std::span<const P2PHandle> one(&op, 1);
    engine_->postThenWait(one, one);
  } else {
    engine_->post(op);
  }
  return true;
}

void P2PRoom::groupStart() {
  std::lock_guard<std::mutex> lk(mu_);
  if (depth_ > 0 && owner_ != std::this_thread::get_id()) {
    throwError(ErrorKind::InvalidArgument,
               "groupStart: another thread has a group open on this communicator");
  }
  owner_ = std::this_thread::get_id();
  depth_++;
}

void P2PRoom::groupEnd() {
  std::vector<P2PHandle> ops, blocking;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (depth_ == 0 || owner_ != std::this_thread::get_id()) {
      throwError(ErrorKind::InvalidArgument, "groupEnd without a matching groupStart");
    }
    if (--depth_ > 0) return;
    owner_ = std::thread::id();
    ops.swap(ops_);
    blocking.swap(blocking_);
  }
  if (ops.empty()) return;
  if (blocking.empty()) {
    engine_->post(ops);
  } else {
    engine_->postThenWait(ops, blocking);
  }
}

}  // namespace tccl
