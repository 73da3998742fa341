// _tccl_torch: tccl as a torch.distributed backend for Debian's torch 1.13
// (python/tccl/torch_backend.py registers it as "tccl"; docs/python.md).
//
// - Rendezvous goes through the store torch hands the backend (TorchStore below
//   adapts c10d::Store to tccl::Store), so init_process_group's env:// or tcp://
//   set-up is all a user needs.
// - Every operation is issued as tccl's asynchronous form and returns a TcclWork
//   whose future (getFuture) completes on tccl's progress thread, in issue order;
//   DistributedDataParallel's reducer chains its callbacks on it.
// - Tensors are used in place (CPU, strided, contiguous). Reductions need one of
//   tccl's element types; operations that only move data (broadcast, gathers,
//   scatters, all-to-all, send/recv) move any other element type as bytes.
// - The list forms (allgather into N tensors, reduce_scatter of N tensors, ...) go
//   through one flat scratch tensor: packed before the call, unpacked by the
//   completion callback before the work counts as completed.
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "tccl/communicator.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace py = pybind11;

namespace {

using Millis = std::chrono::milliseconds;

[[noreturn]] void invalid(const std::string& msg, int rank) {
  tccl::throwError(tccl::ErrorKind::InvalidArgument, "tccl (torch backend): " + msg, rank);
}

// ---- the store --------------------------------------------------------------------------

// tccl::Store over torch's c10d::Store: a torch failure becomes a tccl StoreError (or
// TimeoutError when torch says it timed out), so tccl's error path stays uniform.
class TorchStore final : public tccl::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
    timeout_ = store_->getTimeout();
  }
  void set(const std::string& key, const tccl::Bytes& value) override {
    guard("set", key, [&] { store_->set(key, value); });
  }
  tccl::Bytes get(const std::string& key) override {
    return guard("get", key, [&] { return store_->get(key); });
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return guard("add", key, [&] { return store_->add(key, delta); });
  }
  bool check(const std::vector<std::string>& keys) override {
    return guard("check", keys.empty() ? "" : keys[0], [&] { return store_->check(keys); });
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    // tccl: a non-positive timeout waits forever; torch spells that kNoTimeout.
    const Millis t = timeout.count() <= 0 ? c10d::Store::kNoTimeout : timeout;
    guard("wait", keys.empty() ? "" : keys[0], [&] { store_->wait(keys, t); });
  }
  bool erase(const std::string& key) override {
    return guard("erase", key, [&] { return store_->deleteKey(key); });
  }
  using tccl::Store::wait;

 private:
  template <typename Fn>
  auto guard(const char* what, const std::string& key, Fn&& fn) -> decltype(fn()) {
    std::string msg;
    try {
      return fn();
    } catch (const tccl::Error&) {
      throw;
    } catch (const c10::Error& e) {
      msg = e.what_without_backtrace();
    } catch (const std::exception& e) {
      msg = e.what();
    }
    const bool timedOut =
        msg.find("imeout") != std::string::npos || msg.find("timed out") != std::string::npos;
    tccl::throwError(timedOut ? tccl::ErrorKind::Timeout : tccl::ErrorKind::Store,
                     std::string("torch store ") + what + "('" + key + "'): " + msg);
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

// ---- tensors --------------------------------------------------------------------------

std::optional<tccl::DataType> tcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return tccl::DataType::Float32;
    case at::kDouble:
      return tccl::DataType::Float64;
    case at::kHalf:
      return tccl::DataType::Float16;
    case at::kBFloat16:
      return tccl::DataType::BFloat16;
    case at::kInt:
      return tccl::DataType::Int32;
    case at::kLong:
      return tccl::DataType::Int64;
    case at::kChar:
      return tccl::DataType::Int8;
    case at::kByte:
      return tccl::DataType::UInt8;
    default:
      return std::nullopt;
  }
}

// What tccl is handed for one tensor.
struct Flat {
  void* data = nullptr;
  size_t count = 0;
  tccl::DataType dtype = tccl::DataType::UInt8;
};

void checkUsable(const at::Tensor& t, const char* what, int rank) {
  if (!t.defined()) invalid(std::string(what) + " is undefined", rank);
  if (!t.device().is_cpu())
    invalid(std::string(what) + " is on " + t.device().str() + "; tccl moves CPU tensors", rank);
  if (t.layout() != at::kStrided) invalid(std::string(what) + " is not a dense tensor", rank);
}

void checkContiguous(const at::Tensor& t, const char* what, int rank) {
  if (!t.is_contiguous()) {
    invalid(std::string(what) +
                " is not contiguous; tccl works in place on contiguous tensors (call "
                ".contiguous() and copy the result back)",
            rank);
  }
}

// For reductions: the element type must be one tccl reduces.
Flat forReduce(const at::Tensor& t, const char* what, int rank) {
  checkUsable(t, what, rank);
  checkContiguous(t, what, rank);
  auto dt = tcclType(t.scalar_type());
  if (!dt) {
    invalid(std::string(what) + " has dtype " + std::string(c10::toString(t.scalar_type())) +
                ", which tccl cannot reduce (float32, float64, float16, bfloat16, int32, "
                "int64, int8, uint8)",
            rank);
  }
  return {t.data_ptr(), static_cast<size_t>(t.numel()), *dt};
}

// For data movement: any element type, as bytes when tccl has no name for it.
Flat forMove(const at::Tensor& t, const char* what, int rank) {
  checkUsable(t, what, rank);
  checkContiguous(t, what, rank);
  if (auto dt = tcclType(t.scalar_type()))
    return {t.data_ptr(), static_cast<size_t>(t.numel()), *dt};
  return {t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), tccl::DataType::UInt8};
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op, int rank) {
  if (tensors.size() != 1) {
    invalid(
        std::string(op) + " takes one tensor per process, got " + std::to_string(tensors.size()),
        rank);
  }
  return tensors[0];
}

void sameShape(const at::Tensor& a, const at::Tensor& b, const char* what, int rank) {
  if (a.numel() != b.numel() || a.scalar_type() != b.scalar_type()) {
    invalid(std::string(what) + ": every tensor needs " + std::to_string(b.numel()) +
                " elements of " + std::string(c10::toString(b.scalar_type())) + ", got " +
                std::to_string(a.numel()) + " of " + std::string(c10::toString(a.scalar_type())),
            rank);
  }
}

// N tensors packed into one flat tensor (a copy).
at::Tensor pack(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// The inverse, into the given tensors (which may be views of anything).
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const auto n = t.numel();
    t.copy_(flat.narrow(0, offset, n).view(t.sizes()));
    offset += n;
  }
}

tccl::ReduceOp tcclOp(const c10d::ReduceOp& op, int rank) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return tccl::ReduceOp::Sum;
    case c10d::ReduceOp::AVG:
      return tccl::ReduceOp::Avg;
    case c10d::ReduceOp::PRODUCT:
      return tccl::ReduceOp::Prod;
    case c10d::ReduceOp::MIN:
      return tccl::ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      return tccl::ReduceOp::Max;
    // Integer tensors only: tccl refuses them on a floating dtype (InvalidArgument).
    case c10d::ReduceOp::BAND:
      return tccl::ReduceOp::BAnd;
    case c10d::ReduceOp::BOR:
      return tccl::ReduceOp::BOr;
    case c10d::ReduceOp::BXOR:
      return tccl::ReduceOp::BXor;
    default:
      invalid("reduce op " + std::to_string(static_cast<int>(op.op_)) +
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR are)",
              rank);
  }
}

tccl::CollectiveOptions callOptions(Millis timeout) {
  tccl::CollectiveOptions o;
  if (timeout != c10d::kUnsetTimeout) o.timeout = timeout;
  return o;
}

// ---- work ---------------------------------------------------------------------------------

// A tccl error as torch code expects to read it. A timeout's cause gains "Timed out
// waiting ...", the words torch's tests and users match in gloo's timeouts (tccl's own
// text says "Timeout in <collective>"); the kind, rank and every other fact stay.
std::exception_ptr torchFacing(std::exception_ptr e) {
  if (!e) return e;
  try {
    std::rethrow_exception(e);
  } catch (const tccl::Error& t) {  // the stored exception may be the base class
    if (t.kind() != tccl::ErrorKind::Timeout) return e;
    tccl::ErrorInfo info = t.info();
    info.message = "Timed out waiting" +
                   (info.peer >= 0 ? " for rank " + std::to_string(info.peer) : std::string()) +
                   ": " + info.message;
    try {
      tccl::throwError(std::move(info));
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
  }
  return e;
}

// Completes the works' futures off tccl's progress thread. A future's callbacks run in
// the thread that completes it, and a callback may wait on another work of the same group
// (PowerSGD's hook does, twice per bucket): on the progress thread, which runs that work,
// it would wait on itself. A completion never waits behind a busy thread either: when
// fewer threads are idle than completions are queued, another thread starts (as many as
// callbacks block at once). A thread idle for a second ends, as tccl's progress thread
// does, so an idle group holds no thread (docs/python.md, "new_group"). One idle thread:
// issue order.
//
// A callback may drop the last reference to the group (and a completion the last to its
// work, which holds this too): the Completer is then destroyed on one of its own threads.
// Its threads share the state (Core) and outlive the object; the destructor waits for
// every thread but the one it runs on, which ends once it has run what is queued
// (tests/python/test_torch_backend.py, test_group_dropped_in_its_own_callback).
class Completer {
 public:
  Completer() : core_(std::make_shared<Core>()) {}
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;
  ~Completer() {  // runs what is queued, then waits for every other thread to end
    Core& c = *core_;
    std::unique_lock<std::mutex> lk(c.mu);
    c.stop = true;
    c.cv.notify_all();
    const size_t self = tRunning == &c ? 1 : 0;
    c.ended.wait(lk, [&] { return c.live == self; });
  }
  void post(std::function<void()> fn) {
    Core& c = *core_;
    std::lock_guard<std::mutex> lk(c.mu);
    c.queue.push_back(std::move(fn));
    if (c.queue.size() > c.idle) {
      ++c.live;
      std::thread([core = core_] { run(core); }).detach();  // the destructor waits (live)
    } else {
      c.cv.notify_one();
    }
  }

 private:
  static constexpr std::chrono::seconds kLinger{1};
  struct Core {
    std::mutex mu;
    std::condition_variable cv;
    std::condition_variable ended;
    std::deque<std::function<void()>> queue;
    size_t idle = 0;
    size_t live = 0;
    bool stop = false;
  };
  static thread_local const Core* tRunning;  // the Core whose thread this is, if any

  static void run(const std::shared_ptr<Core>& core) {
    tRunning = core.get();
    Core& c = *core;
    std::unique_lock<std::mutex> lk(c.mu);
    for (;;) {
      ++c.idle;
      const bool woken = c.cv.wait_for(lk, kLinger, [&] { return c.stop || !c.queue.empty(); });
      --c.idle;
      if (c.queue.empty()) {
        if (c.stop || !woken) {
          --c.live;
          c.ended.notify_all();
          return;
        }
        continue;
      }
      auto fn = std::move(c.queue.front());
      c.queue.pop_front();
      lk.unlock();
      fn();
      // What it holds goes before the lock is taken again: it may hold the last reference
      // to the Completer, whose destructor takes the lock.
      fn = nullptr;
      lk.lock();
    }
  }
  std::shared_ptr<Core> core_;
};
thread_local const Completer::Core* Completer::tRunning = nullptr;

// The tccl Work this thread waits on in TcclWork::wait, and the future's completion its
// callback left for that wait to run: when the waiter runs the call itself (tccl's
// Work::wait does when the call is next in the queue), the callback runs on the waiter's
// thread, inside tccl's queue, where the future's callbacks must not run (one that waits
// on this group would wait on itself); wait() runs it once tccl's wait has returned,
// instead of handing it to the Completer's thread (a wake-up per call).
struct InlineCompletion {
  const tccl::Work* work = nullptr;
  std::function<void()> complete;
};
thread_local InlineCompletion tInline;

// A tccl Work as a c10d Work. The completion callback (tccl's progress thread, or the
// waiter's: above) unpacks scratch results, then hands the future's completion to the
// Completer (or to the waiter); tccl counts the work completed only after its callbacks
// have run, so isCompleted() and wait() see the unpacked results.
//
// The future is made when somebody asks for it (getFuture: DDP's reducer does, a blocking
// dist.all_reduce does not), saving a future, its type, an IValue list and a completion
// closure per call (docs/PERFORMANCE.md, "Through torch: the lazy grace timer and the
// lazy future"). One asked for after the work ended is made complete.
class TcclWork final : public c10d::Work {
 public:
  TcclWork(int rank, c10d::OpType type, tccl::WorkPtr work, std::vector<at::Tensor> outputs,
           std::vector<at::Tensor> keepAlive, std::function<void()> unpackResults,
           std::shared_ptr<Completer> completer)
      : c10d::Work(rank, type), work_(std::move(work)), state_(std::make_shared<State>()) {
    state_->work = work_.get();
    state_->outputs = std::move(outputs);
    state_->keepAlive = std::move(keepAlive);
    state_->unpack = std::move(unpackResults);
    state_->completer = std::move(completer);
    // The callback holds every tensor the collective touches (tccl keeps it until it has
    // run; they are in the state), and never this Work or work_: the c10d Work may be dropped
    // before the collective ends. (std::function allocates even for this one shared pointer:
    // libstdc++ keeps only trivially copyable callables inline.)
    work_->onComplete(
        [state = state_](const tccl::Error* error) { State::completed(state, error); });
  }

  bool isCompleted() override { return work_->isCompleted(); }
  bool isSuccess() const override { return work_->isCompleted() && !exception(); }
  std::exception_ptr exception() const override {
    if (auto e = work_->exception()) return torchFacing(e);
    std::lock_guard<std::mutex> lk(state_->mu);
    return state_->unpackError;
  }
  std::vector<at::Tensor> result() override { return state_->outputs; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override {
    tccl::Work& work = *work_;
    try {
      if (timeout == kNoTimeout) {
        // Runs the future's completion if the callback left it here, errors included.
        struct Inline {
          explicit Inline(const tccl::Work* w) { tInline.work = w; }
          ~Inline() {
            tInline.work = nullptr;
            // Nothing else completes this future (the callback left it here instead).
            if (auto fn = std::exchange(tInline.complete, nullptr)) fn();
          }
        } scope(&work);
        work.wait();
      } else {
        work.wait(timeout);
      }
    } catch (const tccl::Error&) {
      std::rethrow_exception(torchFacing(std::current_exception()));
    }
    if (auto e = exception()) std::rethrow_exception(e);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    State& st = *state_;
    std::unique_lock<std::mutex> lk(st.mu);
    if (st.future) return st.future;
    st.future =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    auto future = st.future;
    if (!st.ended) return future;  // the callback completes it
    const std::exception_ptr e = st.futureError;
    lk.unlock();
    State::finish(future, st.outputs, e);
    return future;
  }
  // A receive from any source: who sent it (torch's recv() returns this).
  int sourceRank() const override { return work_->source(); }

 private:
  struct State {
    const tccl::Work* work = nullptr;  // work_, which holds the callback that holds this
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> keepAlive;
    std::function<void()> unpack;
    std::shared_ptr<Completer> completer;
    mutable std::mutex mu;  // guards the rest
    std::exception_ptr unpackError;
    std::exception_ptr futureError;  // the future's: tccl's error or the unpacking's
    bool ended = false;              // the callback has run
    c10::intrusive_ptr<c10::ivalue::Future> future;  // made by getFuture

    static void finish(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                       const std::vector<at::Tensor>& outputs, const std::exception_ptr& e) {
      if (e)
        future->setError(e);
      else
        future->markCompleted(c10::IValue(outputs));
    }

    // tccl's completion callback: on the progress thread, or on the waiter's.
    static void completed(const std::shared_ptr<State>& st, const tccl::Error* error) {
      std::exception_ptr e;
      bool unpackFailed = false;
      if (error) {
        e = torchFacing(st->work->exception());
      } else if (st->unpack) {
        try {
          st->unpack();
        } catch (...) {
          e = std::current_exception();
          unpackFailed = true;
        }
      }
      // The collective's scratch goes now, not with the c10d Work (which torch may keep).
      // Only this callback, which runs once, touches them.
      st->unpack = nullptr;
      st->keepAlive.clear();
      c10::intrusive_ptr<c10::ivalue::Future> future;
      {
        std::lock_guard<std::mutex> lk(st->mu);
        if (unpackFailed) st->unpackError = e;
        st->futureError = e;
        st->ended = true;
        future = st->future;
      }
      if (!future) return;  // nobody asked for one: getFuture makes it complete
      auto complete = [future = std::move(future), st, e] { finish(future, st->outputs, e); };
      if (tInline.work == st->work)
        tInline.complete = std::move(complete);
      else
        st->completer->post(std::move(complete));
    }
  };
  tccl::WorkPtr work_;
  std::shared_ptr<State> state_;
};

// A Work that ran in the calling thread: complete, and successful, when it is made.
class DoneWork final : public c10d::Work {
 public:
  DoneWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(c10::IValue(outputs_));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---- the process group ----------------------------------------------------------------

class ProcessGroupTccl final : public c10d::ProcessGroup {
 public:
  // timeout: torch's (none: the communicator's default); 0 or less is an InvalidArgument.
  ProcessGroupTccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::optional<Millis> timeout, const std::string& listenAddress,
                   const std::string& routeAddress)
      : c10d::ProcessGroup(rank, size) {
    tccl::CommOptions o;
    if (timeout) o.timeout = *timeout;
    o.listenAddress = listenAddress;
    o.routeAddress = routeAddress;
    comm_ =
        std::make_unique<tccl::Communicator>(std::make_shared<TorchStore>(store), rank, size, o);
    init();
  }
  // A group of another's communicator (new_group: Communicator::createGroup).
  explicit ProcessGroupTccl(std::unique_ptr<tccl::Communicator> comm)
      : c10d::ProcessGroup(comm->rank(), comm->size()), comm_(std::move(comm)) {
    init();
  }
  // Destroying the communicator waits for its progress thread: not with the GIL held.
  ~ProcessGroupTccl() override {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      comm_.reset();
      completer_.reset();  // its threads may be running Python callbacks
    }
  }

  const std::string getBackendName() const override { return "tccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const auto& t = single(tensors, "broadcast", rank_);
    if (opts.rootTensor != 0) invalid("broadcast: rootTensor must be 0", rank_);
    const Flat f = forMove(t, "broadcast tensor", rank_);
    auto w = comm_->broadcastAsync(f.data, f.data, f.count, f.dtype,
                                   static_cast<int>(opts.rootRank), callOptions(opts.timeout));
    return make(c10d::OpType::BROADCAST, std::move(w), {t});
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const auto& t = single(tensors, "allreduce", rank_);
    if (t.defined() && t.is_sparse()) return sparseAllreduce(t, opts);
    const Flat f = forReduce(t, "allreduce tensor", rank_);
    auto w = comm_->allreduceAsync(f.data, f.data, f.count, f.dtype, tcclOp(opts.reduceOp, rank_),
                                   callOptions(opts.timeout));
    return make(c10d::OpType::ALLREDUCE, std::move(w), {t});
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    if (tensors.empty()) invalid("allreduce_coalesced: no tensors", rank_);
    for (const auto& t : tensors) {
      forReduce(t, "allreduce_coalesced tensor", rank_);
      if (t.scalar_type() != tensors[0].scalar_type())
        invalid("allreduce_coalesced: tensors of different dtypes", rank_);
    }
    at::Tensor flat = pack(tensors);
    const Flat f = forReduce(flat, "scratch", rank_);
    auto w = comm_->allreduceAsync(f.data, f.data, f.count, f.dtype, tcclOp(opts.reduceOp, rank_),
                                   callOptions(opts.timeout));
    return make(c10d::OpType::ALLREDUCE_COALESCED, std::move(w), tensors, {flat},
                [flat, tensors] { unpack(flat, tensors); });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const auto& t = single(tensors, "reduce", rank_);
    if (opts.rootTensor != 0) invalid("reduce: rootTensor must be 0", rank_);
    const Flat f = forReduce(t, "reduce tensor", rank_);
    auto w = comm_->reduceAsync(f.data, f.data, f.count, f.dtype, tcclOp(opts.reduceOp, rank_),
                                static_cast<int>(opts.rootRank), callOptions(opts.timeout));
    return make(c10d::OpType::REDUCE, std::move(w), {t});
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    const auto& in = single(inputs, "allgather", rank_);
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
      invalid("allgather: expected one list of " + std::to_string(size_) + " outputs", rank_);
    for (const auto& o : outputs[0]) {
      checkUsable(o, "allgather output", rank_);
      sameShape(o, in, "allgather", rank_);
    }
    at::Tensor scratch = at::empty({size_ * in.numel()}, in.options());
    const Flat f = forMove(in, "allgather input", rank_);
    const Flat s = forMove(scratch, "scratch", rank_);
    auto w = comm_->allGatherAsync(f.data, s.data, f.count, f.dtype, callOptions(opts.timeout));
    std::vector<at::Tensor> outs = outputs[0];
    return make(c10d::OpType::ALLGATHER, std::move(w), outs, {in, scratch},
                [scratch, outs] { unpack(scratch, outs); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    if (output.scalar_type() != input.scalar_type() || output.numel() != size_ * input.numel()) {
      invalid("_allgather_base: output needs world size x " + std::to_string(input.numel()) +
                  " elements of the input's dtype",
              rank_);
    }
    const Flat f = forMove(input, "allgather input", rank_);
    const Flat o = forMove(output, "allgather output", rank_);
    auto w = comm_->allGatherAsync(f.data, o.data, f.count, f.dtype, callOptions(opts.timeout));
    return make(c10d::OpType::_ALLGATHER_BASE, std::move(w), {output}, {input});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const auto& out = single(outputs, "reduce_scatter", rank_);
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
      invalid("reduce_scatter: expected one list of " + std::to_string(size_) + " inputs", rank_);
    // Inputs of different sizes (the same list of sizes on every rank, output the size of
    // input `rank`) are MPI_Reduce_scatter: tccl's reduce_scatter_v.
    bool even = true;
    std::vector<size_t> counts;
    for (const auto& i : inputs[0]) {
      checkUsable(i, "reduce_scatter input", rank_);
      if (i.scalar_type() != out.scalar_type())
        invalid("reduce_scatter: inputs and output of different dtypes", rank_);
      even = even && i.sizes() == out.sizes();
      counts.push_back(static_cast<size_t>(i.numel()));
    }
    if (!even && inputs[0][static_cast<size_t>(rank_)].numel() != out.numel())
      sameShape(inputs[0][static_cast<size_t>(rank_)], out, "reduce_scatter", rank_);
    at::Tensor scratch = pack(inputs[0]);
    const Flat s = forReduce(scratch, "scratch", rank_);
    const Flat o = forReduce(out, "reduce_scatter output", rank_);
    auto w =
        even ? comm_->reduceScatterAsync(s.data, o.data, o.count, o.dtype,
                                         tcclOp(opts.reduceOp, rank_), callOptions(opts.timeout))
             : comm_->reduceScatterVAsync(s.data, o.data, counts, o.dtype,
                                          tcclOp(opts.reduceOp, rank_), callOptions(opts.timeout));
    return make(c10d::OpType::REDUCE_SCATTER, std::move(w), {out}, {scratch});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    if (output.scalar_type() != input.scalar_type() || input.numel() != size_ * output.numel()) {
      invalid("_reduce_scatter_base: input needs world size x " + std::to_string(output.numel()) +
                  " elements of the output's dtype",
              rank_);
    }
    const Flat i = forReduce(input, "reduce_scatter input", rank_);
    const Flat o = forReduce(output, "reduce_scatter output", rank_);
    auto w = comm_->reduceScatterAsync(i.data, o.data, o.count, o.dtype,
                                       tcclOp(opts.reduceOp, rank_), callOptions(opts.timeout));
    return make(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(w), {output}, {input});
  }

  // all_to_all_single: equal blocks, or torch's split sizes (rows of dim 0) as an
  // alltoallv. A rank whose splits disagree with a peer's fails with a MismatchError
  // naming both (the count messages, docs/algorithms.md).
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override {
    if (output.scalar_type() != input.scalar_type())
      invalid("all_to_all_single: input and output need the same dtype", rank_);
    const Flat i = forMove(input, "all_to_all input", rank_);
    const Flat o = forMove(output, "all_to_all output", rank_);
    if (i.data == o.data && i.count > 0) invalid("all_to_all_single cannot run in place", rank_);
    const std::vector<size_t> sc = splitCounts(inputSplits, input, "input");
    const std::vector<size_t> rc = splitCounts(outputSplits, output, "output");
    auto w =
        comm_->allToAllVAsync(i.data, sc, {}, o.data, rc, {}, i.dtype, callOptions(opts.timeout));
    return make(c10d::OpType::ALLTOALL_BASE, std::move(w), {output}, {input});
  }

  // all_to_all with a list of tensors each way, of any sizes (output p receives what
  // rank p's input `rank` holds): packed, as an alltoallv.
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    if (inputs.size() != static_cast<size_t>(size_) || outputs.size() != inputs.size())
      invalid("all_to_all: expected " + std::to_string(size_) + " inputs and outputs", rank_);
    std::vector<size_t> sc, rc;
    for (size_t p = 0; p < inputs.size(); ++p) {
      checkUsable(inputs[p], "all_to_all input", rank_);
      checkUsable(outputs[p], "all_to_all output", rank_);
      if (inputs[p].scalar_type() != inputs[0].scalar_type() ||
          outputs[p].scalar_type() != inputs[0].scalar_type())
        invalid("all_to_all: tensors of different dtypes", rank_);
      sc.push_back(static_cast<size_t>(inputs[p].numel()));
      rc.push_back(static_cast<size_t>(outputs[p].numel()));
    }
    at::Tensor in = pack(inputs);
    at::Tensor out = pack(outputs);  // its size; the contents are overwritten
    const Flat i = forMove(in, "scratch", rank_);
    const Flat o = forMove(out, "scratch", rank_);
    auto w =
        comm_->allToAllVAsync(i.data, sc, {}, o.data, rc, {}, i.dtype, callOptions(opts.timeout));
    return make(c10d::OpType::ALLTOALL, std::move(w), outputs, {in, out},
                [out, outputs] { unpack(out, outputs); });
  }

  // all_gather_coalesced: every rank's list of inputs (the same shapes on every rank)
  // into outputLists[p], rank p's list: one all-gather of the packed lists.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    if (inputs.empty()) invalid("all_gather_coalesced: no tensors", rank_);
    if (outputLists.size() != static_cast<size_t>(size_))
      invalid("all_gather_coalesced: expected " + std::to_string(size_) + " output lists", rank_);
    std::vector<at::Tensor> outs;
    for (const auto& list : outputLists) {
      if (list.size() != inputs.size())
        invalid("all_gather_coalesced: every output list needs one tensor per input", rank_);
      for (size_t k = 0; k < list.size(); ++k) {
        checkUsable(list[k], "all_gather_coalesced output", rank_);
        checkUsable(inputs[k], "all_gather_coalesced input", rank_);
        sameShape(list[k], inputs[k], "all_gather_coalesced", rank_);
        if (inputs[k].scalar_type() != inputs[0].scalar_type())
          invalid("all_gather_coalesced: tensors of different dtypes", rank_);
        outs.push_back(list[k]);
      }
    }
    at::Tensor in = pack(inputs);
    at::Tensor scratch = at::empty({size_ * in.numel()}, in.options());
    const Flat f = forMove(in, "scratch", rank_);
    const Flat sc = forMove(scratch, "scratch", rank_);
    auto w = comm_->allGatherAsync(f.data, sc.data, f.count, f.dtype, callOptions(opts.timeout));
    return make(c10d::OpType::ALLGATHER_COALESCED, std::move(w), outs, {in, scratch},
                [scratch, outs] { unpack(scratch, outs); });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    const auto& in = single(inputs, "gather", rank_);
    const int root = static_cast<int>(opts.rootRank);
    const Flat f = forMove(in, "gather input", rank_);
    if (rank_ != root) {
      auto w =
          comm_->gatherAsync(f.data, nullptr, f.count, f.dtype, root, callOptions(opts.timeout));
      return make(c10d::OpType::GATHER, std::move(w), {}, {in});
    }
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
      invalid("gather: the root needs one list of " + std::to_string(size_) + " outputs", rank_);
    for (const auto& o : outputs[0]) {
      checkUsable(o, "gather output", rank_);
      sameShape(o, in, "gather", rank_);
    }
    at::Tensor scratch = at::empty({size_ * in.numel()}, in.options());
    const Flat s = forMove(scratch, "scratch", rank_);
    auto w = comm_->gatherAsync(f.data, s.data, f.count, f.dtype, root, callOptions(opts.timeout));
    std::vector<at::Tensor> outs = outputs[0];
    return make(c10d::OpType::GATHER, std::move(w), outs, {in, scratch},
                [scratch, outs] { unpack(scratch, outs); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const auto& out = single(outputs, "scatter", rank_);
    const int root = static_cast<int>(opts.rootRank);
    const Flat o = forMove(out, "scatter output", rank_);
    at::Tensor scratch;
    const void* send = nullptr;
    if (rank_ == root) {
      if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
        invalid("scatter: the root needs one list of " + std::to_string(size_) + " inputs", rank_);
      for (const auto& i : inputs[0]) {
        checkUsable(i, "scatter input", rank_);
        sameShape(i, out, "scatter", rank_);
      }
      scratch = pack(inputs[0]);
      send = forMove(scratch, "scratch", rank_).data;
    }
    auto w = comm_->scatterAsync(send, o.data, o.count, o.dtype, root, callOptions(opts.timeout));
    return make(c10d::OpType::SCATTER, std::move(w), {out}, {scratch});
  }

  // Point to point with MPI's matching (tccl's p2p engine): tags match independently,
  // messages with one tag between two ranks in order; recvAnysource takes the first
  // message from any rank with the tag, and its Work's sourceRank() names the sender.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    const auto& t = single(tensors, "send", rank_);
    const Flat f = forMove(t, "send tensor", rank_);
    auto w = comm_->sendAsync(f.data, f.count, f.dtype, dst, tag);
    return make(c10d::OpType::SEND, std::move(w), {}, {t});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    const auto& t = single(tensors, "recv", rank_);
    const Flat f = forMove(t, "recv tensor", rank_);
    auto w = comm_->recvAsync(f.data, f.count, f.dtype, src, tag);
    return make(c10d::OpType::RECV, std::move(w), {t});
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    const auto& t = single(tensors, "recv", rank_);
    const Flat f = forMove(t, "recv tensor", rank_);
    auto w = comm_->recvAsync(f.data, f.count, f.dtype, tccl::kAnySource, tag);
    return make(c10d::OpType::RECVANYSOURCE, std::move(w), {t});
  }

  // batch_isend_irecv: torch brackets the batch with these; tccl posts it as one group
  // (Communicator::groupStart / groupEnd), so no operation of the batch waits on the
  // order of another.
  void startCoalescing() override { comm_->groupStart(); }
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) override {
    comm_->groupEnd();
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return make(c10d::OpType::BARRIER, comm_->barrierAsync(callOptions(opts.timeout)), {});
  }

  tccl::Communicator& communicator() { return *comm_; }

 private:
  c10::intrusive_ptr<c10d::Work> make(c10d::OpType type, tccl::WorkPtr work,
                                      std::vector<at::Tensor> outputs,
                                      std::vector<at::Tensor> keepAlive = {},
                                      std::function<void()> unpackResults = {}) {
    return c10::make_intrusive<TcclWork>(rank_, type, std::move(work), std::move(outputs),
                                         std::move(keepAlive), std::move(unpackResults),
                                         completer_);
  }

  // Sparse all-reduce, SUM only (as gloo): every rank's coalesced entries are gathered
  // (their counts and shapes first, then the entries padded to the largest count), summed
  // by coalescing their concatenation, and copied into the tensor. The same inputs in the
  // same order on every rank: every rank gets the same result bit for bit. It runs in the
  // calling thread, after the calls issued before it; the Work it returns is complete.
  c10::intrusive_ptr<c10d::Work> sparseAllreduce(const at::Tensor& t,
                                                 const c10d::AllreduceOptions& opts) {
    if (opts.reduceOp.op_ != c10d::ReduceOp::SUM)
      invalid("sparse all_reduce: only ReduceOp.SUM is supported (as with gloo)", rank_);
    if (!t.device().is_cpu()) invalid("sparse all_reduce: the tensor is not on the CPU", rank_);
    const at::Tensor in = t.coalesce();
    const at::Tensor idx = in._indices().contiguous();  // [sparse dims, nnz], int64
    const at::Tensor val = in._values().contiguous();   // [nnz, dense sizes...]
    const auto o = callOptions(opts.timeout);
    // What every rank must agree on, and its count: one row per rank.
    constexpr int64_t kMaxDims = 16;
    if (in.dim() > kMaxDims) invalid("sparse all_reduce: more than 16 dimensions", rank_);
    std::vector<int64_t> row(4 + kMaxDims, -1);
    row[0] = in._nnz();
    row[1] = in.sparse_dim();
    row[2] = static_cast<int64_t>(val.scalar_type());
    row[3] = in.dim();
    for (int64_t d = 0; d < in.dim(); ++d) row[static_cast<size_t>(4 + d)] = in.size(d);
    std::vector<int64_t> rows(row.size() * static_cast<size_t>(size_));
    comm_->allGather(row.data(), rows.data(), row.size(), tccl::DataType::Int64, o);
    int64_t most = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t* other = rows.data() + row.size() * static_cast<size_t>(r);
      if (!std::equal(row.begin() + 1, row.end(), other + 1)) {
        invalid("sparse all_reduce: rank " + std::to_string(r) +
                    "'s tensor differs in shape, sparse dimensions or dtype from rank " +
                    std::to_string(rank_) + "'s",
                rank_);
      }
      most = std::max(most, other[0]);
    }
    // The entries, padded to the largest count.
    const int64_t sparseDims = in.sparse_dim();
    std::vector<int64_t> valShape = val.sizes().vec();
    valShape[0] = most;
    at::Tensor myIdx = at::zeros({sparseDims, most}, idx.options());
    at::Tensor myVal = at::zeros(valShape, val.options());
    myIdx.narrow(1, 0, in._nnz()).copy_(idx);
    myVal.narrow(0, 0, in._nnz()).copy_(val);
    std::vector<int64_t> allValShape = valShape;
    allValShape.insert(allValShape.begin(), size_);
    at::Tensor allIdx = at::empty({size_, sparseDims, most}, idx.options());
    at::Tensor allVal = at::empty(allValShape, val.options());
    const Flat fi = forMove(myIdx, "scratch", rank_), gi = forMove(allIdx, "scratch", rank_);
    const Flat fv = forMove(myVal, "scratch", rank_), gv = forMove(allVal, "scratch", rank_);
    comm_->allGather(fi.data, gi.data, fi.count, fi.dtype, o);
    comm_->allGather(fv.data, gv.data, fv.count, fv.dtype, o);
    std::vector<at::Tensor> idxs, vals;
    for (int r = 0; r < size_; ++r) {
      const int64_t n = rows[row.size() * static_cast<size_t>(r)];
      idxs.push_back(allIdx[r].narrow(1, 0, n));
      vals.push_back(allVal[r].narrow(0, 0, n));
    }
    at::Tensor sum =
        at::sparse_coo_tensor(at::cat(idxs, 1), at::cat(vals, 0), in.sizes(), in.options())
            .coalesce();
    t.copy_(sum);
    return c10::make_intrusive<DoneWork>(rank_, c10d::OpType::ALLREDUCE, std::vector{t});
  }

  // torch's split sizes (rows of dim 0) as element counts; none: equal blocks.
  std::vector<size_t> splitCounts(const std::vector<int64_t>& splits, const at::Tensor& t,
                                  const char* what) const {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t perRow = rows == 0 ? 0 : t.numel() / rows;
    std::vector<size_t> counts;
    if (splits.empty()) {
      if (rows % size_ != 0) {
        invalid(std::string("all_to_all_single: ") + what + " has " + std::to_string(rows) +
                    " rows, not a multiple of the world size (pass split sizes)",
                rank_);
      }
      counts.assign(static_cast<size_t>(size_), static_cast<size_t>(rows / size_ * perRow));
      return counts;
    }
    if (static_cast<int>(splits.size()) != size_) {
      invalid(std::string("all_to_all_single: ") + what + " split sizes need " +
                  std::to_string(size_) + " entries",
              rank_);
    }
    int64_t sum = 0;
    for (int64_t x : splits) {
      if (x < 0) invalid("all_to_all_single: a negative split size", rank_);
      sum += x;
      counts.push_back(static_cast<size_t>(x * perRow));
    }
    if (sum != rows) {
      invalid(std::string("all_to_all_single: the ") + what + " split sizes sum to " +
                  std::to_string(sum) + ", the " + what + " has " + std::to_string(rows) + " rows",
              rank_);
    }
    return counts;
  }

  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
  std::unique_ptr<tccl::Communicator> comm_;
};

}  // namespace

PYBIND11_MODULE(_tccl_torch, m) {
  m.doc() = "tccl as a torch.distributed backend (import tccl.torch_backend to register it)";
  // The creator torch.distributed calls (through tccl/torch_backend.py): builds the
  // communicator over torch's store, which waits for every rank, so without the GIL.
  // listen_address: CommOptions::listenAddress (wins over everything); route_address:
  // CommOptions::routeAddress (this host's end of the route to MASTER_ADDR, used when
  // TCCL_SOCKET_IFNAME / TCCL_SOCKET_FAMILY do not choose).
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::optional<int64_t> timeoutMs, const std::string& listenAddress,
         const std::string& routeAddress) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        std::optional<Millis> timeout;
        if (timeoutMs) timeout = Millis(*timeoutMs);
        return c10::make_intrusive<ProcessGroupTccl>(store, rank, size, timeout, listenAddress,
                                                     routeAddress);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout_ms"),
      py::arg("listen_address") = "", py::arg("route_address") = "",
      py::call_guard<py::gil_scoped_release>());
  // torch's new_group on a member (torch never calls non-members): a child of `parent`'s
  // communicator over `ranks` (parent ranks, in group-rank order) instead of a new
  // communicator, so the group shares the parent's listener, store and heartbeat thread
  // (docs/python.md, "new_group"). None when `parent` is not a tccl group.
  m.def(
      "create_subgroup",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& parent, const std::vector<int>& ranks,
         const std::string& tag, std::optional<int64_t> timeoutMs) -> py::object {
        auto* t = dynamic_cast<ProcessGroupTccl*>(parent.get());
        if (t == nullptr) return py::none();
        std::optional<Millis> timeout;
        if (timeoutMs) timeout = Millis(*timeoutMs);
        std::optional<tccl::Communicator> child;
        {
          py::gil_scoped_release nogil;
          child = t->communicator().createGroup(ranks, tag, timeout);
        }
        if (!child) {
          invalid("new_group: this rank is not in the group's ranks", t->getRank());
        }
        c10::intrusive_ptr<c10d::ProcessGroup> pg = c10::make_intrusive<ProcessGroupTccl>(
            std::make_unique<tccl::Communicator>(std::move(*child)));
        return py::cast(pg);
      },
      py::arg("parent"), py::arg("ranks"), py::arg("tag"), py::arg("timeout_ms"));
  // How many communicators share a tccl group's listener besides the family's root.
  m.def("attached_communicators",
        [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) -> py::object {
          auto* t = dynamic_cast<ProcessGroupTccl*>(pg.get());
          if (t == nullptr) return py::none();
          return py::int_(t->communicator().attachedCommunicators());
        });
  // The address a tccl process group listens on and publishes (None for any other backend).
  m.def("listen_address", [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) -> py::object {
    auto* t = dynamic_cast<ProcessGroupTccl*>(pg.get());
    if (t == nullptr) return py::none();
    return py::str(t->communicator().listenAddress());
  });
  // Byte counters of a tccl process group (None for any other backend).
  m.def("stats", [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) -> py::object {
    auto* t = dynamic_cast<ProcessGroupTccl*>(pg.get());
    if (t == nullptr) return py::none();
    const auto total = t->communicator().stats().total();
    py::dict d;
    d["payload_sent"] = total.payloadSent;
    d["payload_recv"] = total.payloadRecv;
    d["wire_sent"] = total.wireSent;
    d["wire_recv"] = total.wireRecv;
    d["messages_sent"] = total.messagesSent;
    d["messages_recv"] = total.messagesRecv;
    return d;
  });
}
