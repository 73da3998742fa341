#include "tccl/communicator.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "algorithms/schedule.hpp"
#include "algorithms/select.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "exec/executor.hpp"
#include "reduce/reduce.hpp"
#include "transport/socket.hpp"
#include "transport/transport.hpp"
#include "transport/wire.hpp"

namespace tccl {
namespace {

uint64_t randomJobId() {
  uint64_t id = 0;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = ::read(fd, &id, sizeof id);
    ::close(fd);
    if (n == static_cast<ssize_t>(sizeof id) && id != 0) return id;
  }
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

// Busy-poll (yielding the core each round) this long before sleeping in poll(2):
// a wake-up from poll costs tens of microseconds, more than a small message's hop.
// Measured in docs/PERFORMANCE.md.
constexpr int64_t kDefaultSpinMicros = 50;


}  // namespace

// An all-reduce that passed validation and has its place in the issue order.
struct PreparedAllreduce {
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  Algorithm algorithm = Algorithm::Ring;
  std::string why;
  std::optional<std::chrono::milliseconds> timeout;
  int64_t seq = -1;
};

struct Communicator::Impl {
  std::shared_ptr<Store> userStore;
  std::shared_ptr<Store> store;  // namespaced
  std::unique_ptr<TcpStoreServer> ownedServer;
  int rank = 0;
  int size = 1;
  CommOptions options;
  std::chrono::milliseconds timeout{0};
  size_t segmentBytes = config::kDefaultSegmentBytes;
  int spinMicros = 0;
  std::optional<Algorithm> envAlgorithm;
  algo::LinkModel model;
  uint64_t jobId = 0;
  std::unique_ptr<Transport> transport;
  Executor executor;
  int64_t seq = 0;
  CallStats last;

  // The first fatal error. Guarded by abortMu, a leaf lock (nothing else is taken
  // while it is held).
  mutable std::mutex abortMu;
  std::optional<ErrorInfo> abortCause;

  // Issue order and execution. issueMu guards the queue, `busy`, `seq` and the
  // progress thread's life; execMu is held while a collective runs (transport,
  // executor, counters). Lock order: issueMu, then execMu; the progress thread never
  // holds both.
  std::mutex issueMu;
  std::condition_variable queueCv;
  std::deque<std::pair<PreparedAllreduce, WorkPtr>> queue;
  bool busy = false;
  bool stopping = false;
  std::thread progress;
  std::mutex execMu;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(issueMu);
      stopping = true;
    }
    queueCv.notify_all();
    if (progress.joinable()) progress.join();  // drains the queue first
  }

  void progressLoop();
  void execute(PreparedAllreduce& call, CallStats* stats);

  [[noreturn]] void invalid(const std::string& msg) const {
    throwError(ErrorKind::InvalidArgument, msg, rank);
  }

  void checkUsable() const {
    std::lock_guard<std::mutex> lk(abortMu);
    if (!abortCause) return;
    ErrorInfo info = *abortCause;
    info.kind = ErrorKind::Aborted;
    info.message = "communicator aborted because of earlier error: " + Error::format(*abortCause);
    info.rank = rank;
    throwError(std::move(info));
  }

  Deadline deadlineFor(const std::optional<std::chrono::milliseconds>& perCall, int64_t* ms) const {
    auto t = perCall.value_or(timeout);
    *ms = t.count() <= 0 ? -1 : t.count();
    return t.count() <= 0 ? Deadline::never() : Deadline::after(t);
  }
};

Communicator::Communicator(std::shared_ptr<Store> store, int rank, int size, CommOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (!store) throwError(ErrorKind::InvalidArgument, "Communicator: store is null", rank);
  if (size < 1)
    throwError(ErrorKind::InvalidArgument,
               "Communicator: world size " + std::to_string(size) + " < 1", rank);
  if (rank < 0 || rank >= size) {
    throwError(
        ErrorKind::InvalidArgument,
        "Communicator: rank " + std::to_string(rank) + " not in [0, " + std::to_string(size) + ")",
        rank);
  }
  log::setRank(rank);
  m.userStore = store;
  m.rank = rank;
  m.size = size;
  m.options = options;
  m.timeout = options.timeout;
  if (auto t = config::timeoutMs()) m.timeout = std::chrono::milliseconds(*t);
  m.segmentBytes = options.segmentBytes ? options.segmentBytes : config::segmentBytes();
  m.spinMicros = static_cast<int>(config::spinMicros().value_or(kDefaultSpinMicros));
  m.envAlgorithm = config::allreduceAlgorithm();
  m.model = algo::LinkModel::fromEnv();
  m.store = std::make_shared<PrefixStore>("tccl/" + options.name, store);

  // The job id ties every connection to this job: rank 0 draws it, the rest read it.
  if (rank == 0) {
    uint64_t id = randomJobId();
    if (auto env = config::getEnv("TCCL_JOB_ID")) id = wire::hash64(*env);
    m.store->setString("jobid", std::to_string(id));
    m.jobId = id;
  } else {
    m.store->wait({"jobid"}, m.timeout.count() > 0 ? m.timeout : Store::kDefaultTimeout);
    m.jobId = std::stoull(m.store->getString("jobid"));
  }

  TransportConfig tc;
  tc.rank = rank;
  tc.worldSize = size;
  tc.jobId = m.jobId;
  tc.commId = wire::hash64(options.name);
  tc.socketBufferBytes = config::socketBufferBytes();
  if (!options.listenAddress.empty()) {
    tc.listenAddress = options.listenAddress;
  } else if (auto* tcp = dynamic_cast<TcpStore*>(store.get())) {
    tc.listenAddress = tcp->localAddress();
  }
  m.transport = std::make_unique<Transport>(tc, m.store);
  TCCL_INFO("communicator '" << options.name << "' rank " << rank << "/" << size << " job "
                             << std::hex << m.jobId << std::dec << " segment " << m.segmentBytes
                             << " B timeout " << m.timeout.count() << " ms");
}

Communicator Communicator::fromEnv(CommOptions options) {
  auto intVar = [](const char* primary, const char* fallback) -> std::optional<int64_t> {
    if (auto v = config::getEnvInt(primary, 0, 1 << 30)) return v;
    return config::getEnvInt(fallback, 0, 1 << 30);
  };
  auto rank = intVar("TCCL_RANK", "RANK");
  auto size = intVar("TCCL_WORLD_SIZE", "WORLD_SIZE");
  if (!rank || !size) {
    throwError(ErrorKind::InvalidArgument,
               "Communicator::fromEnv: set TCCL_RANK and TCCL_WORLD_SIZE (or RANK and WORLD_SIZE)");
  }
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  auto timeout = config::timeoutMs();
  std::chrono::milliseconds connectTimeout = timeout && *timeout > 0
                                                 ? std::chrono::milliseconds(*timeout)
                                                 : std::chrono::milliseconds(60000);
  if (auto addr = config::getEnv("TCCL_STORE")) {
    auto [host, port] = net::splitHostPort(*addr);
    store = std::make_shared<TcpStore>(host, port, connectTimeout);
  } else {
    auto host = config::getEnv("MASTER_ADDR");
    auto port = config::getEnvInt("MASTER_PORT", 1, 65535);
    if (!host || !port) {
      throwError(ErrorKind::InvalidArgument,
                 "Communicator::fromEnv: set TCCL_STORE=host:port (or MASTER_ADDR and MASTER_PORT)",
                 static_cast<int>(*rank));
    }
    bool agentStore = config::getEnv("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    if (*rank == 0 && !agentStore) {
      server = std::make_unique<TcpStoreServer>(*host, static_cast<uint16_t>(*port));
    }
    store = std::make_shared<TcpStore>(*host, static_cast<uint16_t>(*port), connectTimeout);
  }
  Communicator comm(store, static_cast<int>(*rank), static_cast<int>(*size), std::move(options));
  comm.impl_->ownedServer = std::move(server);
  return comm;
}

Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
const CallStats& Communicator::lastCall() const { return impl_->last; }
CommStats Communicator::stats() const {
  std::lock_guard<std::mutex> lk(impl_->execMu);
  return impl_->transport->stats();
}
void Communicator::resetStats() {
  std::lock_guard<std::mutex> lk(impl_->execMu);
  impl_->transport->resetStats();
}
int64_t Communicator::sequence() const {
  std::lock_guard<std::mutex> lk(impl_->issueMu);
  return impl_->seq;
}
const std::shared_ptr<Store>& Communicator::store() const { return impl_->userStore; }
std::string Communicator::listenAddress() const { return impl_->transport->listenAddress(); }

Algorithm Communicator::chooseAllreduceAlgorithm(size_t bytes, std::string* why) const {
  if (impl_->envAlgorithm && *impl_->envAlgorithm != Algorithm::Auto) {
    if (why) *why = "TCCL_ALGO";
    return *impl_->envAlgorithm;
  }
  return algo::chooseAllreduce(impl_->size, bytes, impl_->model, why);
}

PreparedAllreduce Communicator::prepareAllreduce(const void* sendbuf, void* recvbuf, size_t count,
                                                 DataType dtype, ReduceOp op,
                                                 const AllreduceOptions& options) {
  Impl& m = *impl_;
  m.checkUsable();
  if (!isValid(dtype))
    m.invalid("allreduce: unknown dtype " + std::to_string(static_cast<int>(dtype)));
  if (!isValid(op))
    m.invalid("allreduce: unknown reduce op " + std::to_string(static_cast<int>(op)));
  const size_t elem = dataTypeSize(dtype);
  if (count > (size_t{1} << 62) / elem)
    m.invalid("allreduce: count " + std::to_string(count) + " too large");
  const size_t bytes = count * elem;
  if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr))
    m.invalid("allreduce: null buffer with count > 0");
  PreparedAllreduce call;
  call.in = static_cast<const uint8_t*>(sendbuf);
  call.out = static_cast<uint8_t*>(recvbuf);
  if (call.in != call.out && count > 0 && call.in < call.out + bytes &&
      call.out < call.in + bytes) {
    m.invalid("allreduce: input and output overlap without being the same buffer");
  }
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.timeout = options.timeout;
  call.why = "requested";
  call.algorithm = options.algorithm;
  if (call.algorithm == Algorithm::Auto) {
    call.algorithm = chooseAllreduceAlgorithm(bytes, &call.why);
  }
  if (m.size == 1) call.algorithm = Algorithm::Ring;  // nothing moves; both are a copy
  return call;
}

void Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             ReduceOp op, const AllreduceOptions& options) {
  Impl& m = *impl_;
  PreparedAllreduce call = prepareAllreduce(sendbuf, recvbuf, count, dtype, op, options);
  std::unique_lock<std::mutex> issue(m.issueMu);
  call.seq = m.seq++;
  if (m.queue.empty() && !m.busy) {
    // Nothing queued: run on this thread. Taking execMu before releasing issueMu keeps
    // anything issued after this call from running before it.
    std::lock_guard<std::mutex> exec(m.execMu);
    issue.unlock();
    CallStats stats;
    m.execute(call, &stats);
    m.last = std::move(stats);
    return;
  }
  // Asynchronous work is queued ahead of this call: wait for its turn.
  auto work = std::make_shared<Work>("allreduce", call.seq, m.rank);
  m.queue.emplace_back(std::move(call), work);
  issue.unlock();
  m.queueCv.notify_all();
  work->wait();
  m.last = work->stats();
}

WorkPtr Communicator::allreduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, ReduceOp op, const AllreduceOptions& options) {
  Impl& m = *impl_;
  PreparedAllreduce call = prepareAllreduce(sendbuf, recvbuf, count, dtype, op, options);
  std::unique_lock<std::mutex> issue(m.issueMu);
  call.seq = m.seq++;
  auto work = std::make_shared<Work>("allreduce", call.seq, m.rank);
  m.queue.emplace_back(std::move(call), work);
  if (!m.progress.joinable()) m.progress = std::thread([&m] { m.progressLoop(); });
  issue.unlock();
  m.queueCv.notify_all();
  return work;
}

void Communicator::Impl::progressLoop() {
  for (;;) {
    std::pair<PreparedAllreduce, WorkPtr> task;
    {
      std::unique_lock<std::mutex> lk(issueMu);
      queueCv.wait(lk, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and drained
      task = std::move(queue.front());
      queue.pop_front();
      busy = true;
    }
    CallStats stats;
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> exec(execMu);
      task.second->markStarted();
      try {
        execute(task.first, &stats);
      } catch (...) {
        error = std::current_exception();
      }
    }
    task.second->complete(std::move(stats), error);
    {
      std::lock_guard<std::mutex> lk(issueMu);
      busy = false;
    }
    queueCv.notify_all();
  }
}

// Runs one all-reduce on the calling thread. execMu is held.
void Communicator::Impl::execute(PreparedAllreduce& call, CallStats* stats) {
  checkUsable();  // an earlier queued call may have failed
  const uint8_t* in = call.in;
  uint8_t* out = call.out;
  const size_t count = call.count;
  const DataType dtype = call.dtype;
  const ReduceOp op = call.op;
  const Algorithm algorithm = call.algorithm;
  const size_t elem = dataTypeSize(dtype);
  const size_t bytes = count * elem;
  int64_t timeoutMs = -1;
  const Deadline deadline = deadlineFor(call.timeout, &timeoutMs);
  const auto start = Deadline::Clock::now();
  stats->collective = "allreduce";
  stats->algorithm = std::string(toString(algorithm));
  stats->seq = call.seq;
  stats->count = count;
  stats->bytes = bytes;
  TCCL_INFO("allreduce #" << call.seq << " " << count << " x " << toString(dtype) << " "
                          << toString(op) << ": " << toString(algorithm) << " (" << call.why
                          << ")");

  const size_t segElems = std::max<size_t>(1, segmentBytes / elem);
  algo::Schedule schedule = algorithm == Algorithm::Naive
                                ? algo::naiveAllreduce(rank, size, count, segElems)
                                : algo::ringAllreduce(rank, size, count, segElems);
  // Naive reads its input while it writes its output; in place, it works from a copy.
  std::vector<uint8_t> inputCopy;
  if (algorithm == Algorithm::Naive && in == out && count > 0 && size > 1) {
    inputCopy.assign(in, in + bytes);
    in = inputCopy.data();
  }

  ExecContext ctx;
  ctx.input = in;
  ctx.output = out;
  ctx.dtype = dtype;
  ctx.op = op;
  ctx.worldSize = size;
  ctx.rank = rank;
  ctx.seq = static_cast<uint32_t>(call.seq);
  ctx.fingerprint =
      wire::fingerprint("allreduce", static_cast<uint8_t>(algorithm), static_cast<uint8_t>(dtype),
                        static_cast<uint8_t>(op), count, -1);
  ctx.collective = "allreduce";
  ctx.seqFull = call.seq;
  ctx.deadline = deadline;
  ctx.timeoutMs = timeoutMs;
  ctx.spinMicros = spinMicros;

  const CommStats before = transport->stats();
  try {
    if (size == 1 || count == 0) {
      if (in != out && count > 0) std::memcpy(out, in, bytes);
      if (op == ReduceOp::Avg && count > 0) reduce::divide(out, count, dtype, size);
    } else {
      try {
        transport->connect(schedule.peers, deadline);
      } catch (const Error& e) {
        ErrorInfo info = e.info();
        info.collective = "allreduce";
        info.seq = call.seq;
        info.algorithm = schedule.algorithm;
        info.phase = "connect";
        info.timeoutMs = timeoutMs;
        throwError(std::move(info));
      }
      executor.run(schedule, ctx, *transport);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::InvalidArgument) {
      {
        std::lock_guard<std::mutex> lk(abortMu);
        if (!abortCause) abortCause = e.info();
      }
      transport->closeAll();
    }
    throw;
  }
  const CommStats after = transport->stats();
  for (const auto& [peer, c] : after.perPeer) {
    auto it = before.perPeer.find(peer);
    stats->traffic.perPeer[peer] = it == before.perPeer.end() ? c : c - it->second;
  }
  stats->seconds = std::chrono::duration<double>(Deadline::Clock::now() - start).count();
}

}  // namespace tccl
