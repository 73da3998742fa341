// Handles of asynchronous collectives.
//
//   auto work = comm.allreduceAsync(std::span<float>(grad), tccl::ReduceOp::Avg);
//   ... compute ...
//   work->wait();           // rethrows the collective's error, if any
//
// Threading rules (see docs/async.md):
// - Any thread may issue collectives on a communicator; they execute in the order they
//   were issued, one at a time, and every rank must issue the same sequence.
// - Asynchronous collectives run on the communicator's progress thread, started on the
//   first asynchronous call, or on the thread that waits on one (wait() without a timeout)
//   issued to an idle queue, if it waits within 50 us (docs/async.md). A blocking call with
//   nothing queued runs on the caller's thread (lowest latency); with work queued it waits
//   its turn.
// - Buffers of an asynchronous call must stay valid and untouched until it completes.
// - Completion callbacks run on the thread that ran the call (the progress thread, or the
//   waiter's), exactly once, in issue order. They may issue asynchronous calls but must not
//   wait on the same communicator.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "tccl/error.hpp"
#include "tccl/stats.hpp"

namespace tccl {

class Work {
 public:
  using Callback = std::function<void(const Error* error)>;
  using Clock = std::chrono::steady_clock;

  Work(std::string collective, int64_t seq, int rank);
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // True once the collective has finished, successfully or not.
  bool isCompleted() const;
  bool test() const { return isCompleted(); }
  // Blocks until the collective completes (and its callbacks have run), then rethrows
  // its error if it failed. With a
  // timeout, throws TimeoutError if it has not completed by then; the collective
  // itself goes on (wait again, or let the communicator's own deadline end it).
  void wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Runs fn once when the collective completes (on the progress thread, or on the thread
  // of a wait() that ran the call itself), or right away on this thread if it already has.
  // error is null on success. fn must not destroy the Communicator that issued the work:
  // its destructor joins the progress thread and waits for a waiter running a call.
  void onComplete(Callback fn);

  // Valid once completed.
  const CallStats& stats() const { return stats_; }
  std::exception_ptr exception() const;
  Clock::time_point startTime() const { return started_; }
  Clock::time_point endTime() const { return ended_; }
  int64_t seq() const { return seq_; }
  // A point-to-point receive, once completed: who sent the message and its tag (-1
  // for anything else); stats().bytes is its length.
  int source() const;
  int tag() const;

  // ---- for the communicator ----
  void markStarted();
  // Records the outcome and runs the callbacks. Called exactly once.
  void complete(CallStats stats, std::exception_ptr error);
  // The same, for a point-to-point operation: its sender and tag (a receive's) and when it
  // ended, as the engine measured it (no second clock read).
  void complete(CallStats stats, std::exception_ptr error, int source, int tag,
                Clock::time_point ended);
  // When the operation was issued (before it is handed to anyone: no lock).
  void setStarted(Clock::time_point t) { started_ = t; }
  // Called by wait() before it sleeps: a point-to-point operation's waiter drives the
  // progress itself (no hand-off to another thread). It returns once the work is done
  // or can do nothing more; it must not throw. Set before the Work is handed to anyone,
  // once.
  void setDriver(std::function<void()> driver);

 private:
  void runCallback(const Callback& fn, const std::exception_ptr& error);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Set under mu_ once the outcome is recorded and the callbacks ran; read without it by
  // isCompleted() and wait()'s fast path (the outcome is written before it).
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::vector<Callback> callbacks_;
  CallStats stats_;
  std::string collective_;
  int64_t seq_ = -1;
  int rank_ = -1;
  int source_ = -1;
  int tag_ = -1;
  std::function<void()> driver_;
  Clock::time_point started_{};
  Clock::time_point ended_{};
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tccl
