#include "tccl/work.hpp"

#include "base/log.hpp"

namespace tccl {

Work::Work(std::string collective, int64_t seq, int rank)
    : collective_(std::move(collective)), seq_(seq), rank_(rank) {}

bool Work::isCompleted() const { return done_.load(std::memory_order_acquire); }

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

int Work::source() const {
  std::lock_guard<std::mutex> lk(mu_);
  return source_;
}

int Work::tag() const {
  std::lock_guard<std::mutex> lk(mu_);
  return tag_;
}

void Work::setDriver(std::function<void()> driver) {
  std::lock_guard<std::mutex> lk(mu_);
  driver_ = std::move(driver);
}

void Work::wait(std::optional<std::chrono::milliseconds> timeout) {
  // driver_ is set before the Work is handed out and never changes after: called in
  // place, not copied (a copy is an allocation per wait).
  if (driver_ && !timeout && !isCompleted()) driver_();
  if (isCompleted()) {  // error_ is written before done_, and never after
    if (error_) std::rethrow_exception(error_);
    return;
  }
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout) {
    if (!cv_.wait_for(lk, *timeout, [&] { return done_.load(std::memory_order_relaxed); })) {
      ErrorInfo info;
      info.kind = ErrorKind::Timeout;
      info.rank = rank_;
      info.collective = collective_;
      info.seq = seq_;
      info.message = "Work::wait: not completed yet (the collective goes on)";
      info.elapsedMs = timeout->count();
      info.timeoutMs = timeout->count();
      throwError(std::move(info));
    }
  } else {
    cv_.wait(lk, [&] { return done_.load(std::memory_order_relaxed); });
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::onComplete(Callback fn) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!done_) {
    callbacks_.push_back(std::move(fn));
    return;
  }
  std::exception_ptr err = error_;
  lk.unlock();
  runCallback(fn, err);
}

void Work::markStarted() {
  std::lock_guard<std::mutex> lk(mu_);
  started_ = Clock::now();
}

void Work::complete(CallStats stats, std::exception_ptr error) {
  complete(std::move(stats), std::move(error), -1, -1, Clock::now());
}

void Work::complete(CallStats stats, std::exception_ptr error, int source, int tag,
                    Clock::time_point ended) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_ = std::move(stats);
    error_ = error;
    source_ = source;
    tag_ = tag;
    ended_ = ended;
    if (started_ == Clock::time_point{}) started_ = ended_;
    if (callbacks_.empty()) {
      done_ = true;
    } else {
      callbacks.swap(callbacks_);
    }
  }
  // Run the callbacks before declaring the work done, so that wait() returns only
  // after they have run (a bucket's results are unpacked by its callback). Callbacks
  // registered while these run are picked up by the next round.
  while (!callbacks.empty()) {
    for (auto& fn : callbacks) runCallback(fn, error);
    callbacks.clear();
    std::lock_guard<std::mutex> lk(mu_);
    if (callbacks_.empty()) {
      done_ = true;
    } else {
      callbacks.swap(callbacks_);
    }
  }
  cv_.notify_all();
}

void Work::runCallback(const Callback& fn, const std::exception_ptr& error) {
  // A callback that throws must not take the progress thread down with it.
  try {
    if (!error) {
      fn(nullptr);
      return;
    }
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      fn(&e);
    }
  } catch (const std::exception& e) {
    TCCL_WARN("a completion callback of " << collective_ << " #" << seq_ << " threw: " << e.what());
  } catch (...) {
    TCCL_WARN("a completion callback of " << collective_ << " #" << seq_ << " threw");
  }
}

}  // namespace tccl
