// The public calls: construction, the collectives (each fills a PreparedCall and hands
// it to the call queue, progress.cpp), accessors, measureLinks, abort and shrink. The
// other rooms: core/comm_impl.hpp.
#include "tccl/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "base/config.hpp"
#include "base/log.hpp"
#include "core/comm_impl.hpp"
#include "core/launch_env.hpp"

namespace tccl {

// ---- construction ------------------------------------------------------------------------

namespace {

void checkOptions(const CommOptions& options, int rank) {
  config::checkTimeout("CommOptions::timeout of " + std::to_string(options.timeout.count()) + " ms",
                       options.timeout.count(), rank);
}

}  // namespace

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
  checkOptions(options, rank);
  log::setRank(rank);
  // The steps (bootstrap.cpp, heartbeat.cpp): settings from the options and the
  // environment; the job record (rank 0 writes, the rest read); the listener and the
  // host key; the abort wake-up, TCCL_FAULT and the heartbeat thread.
  m.readSettings(store, rank, size, options);
  m.joinJob();
  m.openTransport();
  m.startFailureWatch();
  if (options.measureLinks || config::getEnv("TCCL_TUNE").value_or("") == "startup") measureLinks();
  TCCL_INFO("communicator '" << options.name << "' rank " << rank << "/" << size << " job "
                             << std::hex << m.boot.jobId << std::dec << " segment "
                             << (m.boot.segmentFixed ? "" : "at most ") << m.boot.segmentBytes
                             << " B timeout " << m.boot.timeout.count() << " ms");
}

Communicator Communicator::fromEnv(CommOptions options) {
  // Rank, world size and store from whichever launcher started us (tccl launch, torchrun,
  // mpirun, srun); the precedence is in src/core/launch_env.hpp and docs/launch.md.
  const launch::LaunchEnv env = launch::resolveLaunchEnv();
  TCCL_INFO("fromEnv: " << env.describe());
  checkOptions(options, env.rank);  // before any store is hosted or dialled
  auto timeout = config::timeoutMs();
  const std::chrono::milliseconds connectTimeout =
      timeout ? std::chrono::milliseconds(*timeout) : std::chrono::milliseconds(60000);
  std::unique_ptr<TcpStoreServer> server;
  if (env.hostsStore) server = std::make_unique<TcpStoreServer>(env.storeHost, env.storePort);
  auto store = std::make_shared<TcpStore>(env.storeHost, env.storePort, connectTimeout);
  Communicator comm(store, env.rank, env.worldSize, std::move(options));
  comm.impl_->boot.ownedServer = std::move(server);
  comm.impl_->boot.waitForExits = comm.impl_->boot.ownedServer != nullptr;
  return comm;
}

Communicator::Impl::~Impl() {
  {
    // No queued Work's driver runs a call here from now on (waits for those that do).
    std::unique_lock<std::shared_mutex> lk(queue.gate->mu);
    queue.gate->alive = false;
  }
  {
    std::lock_guard<std::mutex> lk(queue.issueMu);
    queue.stopping = true;
  }
  queue.wake();
  if (queue.progress.joinable()) queue.progress.join();  // drains the queue first
  {
    // Before the transport whose p2p links it uses; fails what is still pending.
    std::lock_guard<std::mutex> lk(p2p.mu);
    p2p.published.store(nullptr, std::memory_order_release);
    p2p.room.reset();
  }
  stopHeartbeat();
  leaveStore();
  // The family's hub transport may outlive this communicator (its children hold it).
  if (boot.transport) boot.transport->setInterrupt(-1, nullptr);
  if (failure.wakeFd >= 0) ::close(failure.wakeFd);
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

// ---- accessors ---------------------------------------------------------------------------

int Communicator::rank() const { return impl_->boot.rank; }
int Communicator::size() const { return impl_->boot.size; }
const CallStats& Communicator::lastCall() const { return impl_->queue.last; }
CommStats Communicator::stats() const {
  std::lock_guard<std::mutex> lk(impl_->exec.execMu);
  return impl_->boot.transport->stats();
}
void Communicator::resetStats() {
  std::lock_guard<std::mutex> lk(impl_->exec.execMu);
  impl_->boot.transport->resetStats();
}
int64_t Communicator::sequence() const {
  std::lock_guard<std::mutex> lk(impl_->queue.issueMu);
  return impl_->queue.seq;
}
const std::shared_ptr<Store>& Communicator::store() const { return impl_->boot.userStore; }
std::string Communicator::listenAddress() const { return impl_->boot.transport->listenAddress(); }

// ---- the link model ----------------------------------------------------------------------

LinkEstimate Communicator::linkModel() const {
  return {impl_->boot.model.alphaSec * 1e6, 1e-9 / impl_->boot.model.betaSecPerByte};
}

LinkEstimate Communicator::measureLinks(int iterations, size_t bandwidthBytes) {
  Impl& m = *impl_;
  const int rank = m.boot.rank;
  double est[2] = {m.boot.model.alphaSec, m.boot.model.betaSecPerByte};
  if (m.boot.size > 1 && rank <= 1) {
    // Ranks 0 and 1: ping-pong of 8 bytes for the per-message time (half a round trip),
    // then bandwidthBytes each way for the per-byte time.
    const int peer = 1 - rank;
    std::vector<uint8_t> small(8), big(bandwidthBytes);
    auto pingPong = [&](std::vector<uint8_t>& buf) {
      if (rank == 0) {
        send(buf.data(), buf.size(), DataType::UInt8, peer);
        recv(buf.data(), buf.size(), DataType::UInt8, peer);
      } else {
        recv(buf.data(), buf.size(), DataType::UInt8, peer);
        send(buf.data(), buf.size(), DataType::UInt8, peer);
      }
    };
    for (int i = 0; i < 10; ++i) pingPong(small);  // connect, warm up
    auto t0 = Deadline::Clock::now();
    for (int i = 0; i < iterations; ++i) pingPong(small);
    const double alpha =
        std::chrono::duration<double>(Deadline::Clock::now() - t0).count() / (2.0 * iterations);
    pingPong(big);
    const int rounds = 3;
    t0 = Deadline::Clock::now();
    for (int i = 0; i < rounds; ++i) pingPong(big);
    const double perTransfer =
        std::chrono::duration<double>(Deadline::Clock::now() - t0).count() / (2.0 * rounds);
    est[0] = alpha;
    est[1] = std::max(perTransfer - alpha, 1e-12) /
             static_cast<double>(std::max<size_t>(bandwidthBytes, 1));
  }
  // Everyone takes rank 0's figures, so every rank's Auto agrees.
  broadcast(est, 2, DataType::Float64, 0);
  m.boot.model.alphaSec = est[0];
  m.boot.model.betaSecPerByte = est[1];
  TCCL_INFO("measured links: alpha " << est[0] * 1e6 << " us, " << 1e-9 / est[1] << " GB/s");
  return linkModel();
}

Algorithm Communicator::chooseAllreduceAlgorithm(size_t bytes, std::string* why) const {
  return impl_->chooseAllreduce(bytes, why);
}

// ---- the collectives: each fills a PreparedCall ------------------------------------------

namespace {

using algo::Collective;

PreparedCall makeCall(Collective kind, const void* in, void* out, size_t count, DataType dtype,
                      ReduceOp op, int root, const CollectiveOptions& o) {
  PreparedCall c;
  c.kind = kind;
  c.in = static_cast<const uint8_t*>(in);
  c.out = static_cast<uint8_t*>(out);
  c.count = count;
  c.dtype = dtype;
  c.op = op;
  c.root = root;
  c.algorithm = o.algorithm;
  c.timeout = o.timeout;
  return c;
}

}  // namespace

void Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             ReduceOp op, const AllreduceOptions& options) {
  issue(makeCall(Collective::AllReduce, sendbuf, recvbuf, count, dtype, op, -1, options), false);
}
WorkPtr Communicator::allreduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, ReduceOp op, const AllreduceOptions& options) {
  return issue(makeCall(Collective::AllReduce, sendbuf, recvbuf, count, dtype, op, -1, options),
               true);
}
void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t recvCount,
                                 DataType dtype, ReduceOp op, const CollectiveOptions& options) {
  issue(makeCall(Collective::ReduceScatter, sendbuf, recvbuf, recvCount, dtype, op, -1, options),
        false);
}
WorkPtr Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvCount,
                                         DataType dtype, ReduceOp op,
                                         const CollectiveOptions& options) {
  return issue(
      makeCall(Collective::ReduceScatter, sendbuf, recvbuf, recvCount, dtype, op, -1, options),
      true);
}
void Communicator::allGather(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                             const CollectiveOptions& options) {
  issue(makeCall(Collective::AllGather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, -1,
                 options),
        false);
}
WorkPtr Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendCount,
                                     DataType dtype, const CollectiveOptions& options) {
  return issue(makeCall(Collective::AllGather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum,
                        -1, options),
               true);
}
void Communicator::broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             int root, const CollectiveOptions& options) {
  issue(
      makeCall(Collective::Broadcast, sendbuf, recvbuf, count, dtype, ReduceOp::Sum, root, options),
      false);
}
WorkPtr Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, int root, const CollectiveOptions& options) {
  return issue(
      makeCall(Collective::Broadcast, sendbuf, recvbuf, count, dtype, ReduceOp::Sum, root, options),
      true);
}
void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          ReduceOp op, int root, const CollectiveOptions& options) {
  issue(makeCall(Collective::Reduce, sendbuf, recvbuf, count, dtype, op, root, options), false);
}
WorkPtr Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                  ReduceOp op, int root, const CollectiveOptions& options) {
  return issue(makeCall(Collective::Reduce, sendbuf, recvbuf, count, dtype, op, root, options),
               true);
}
void Communicator::barrier(const CollectiveOptions& options) {
  issue(makeCall(Collective::Barrier, nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum, -1,
                 options),
        false);
}
WorkPtr Communicator::barrierAsync(const CollectiveOptions& options) {
  return issue(makeCall(Collective::Barrier, nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum,
                        -1, options),
               true);
}
void Communicator::allToAll(const void* sendbuf, void* recvbuf, size_t countPerRank, DataType dtype,
                            const CollectiveOptions& options) {
  issue(makeCall(Collective::AllToAll, sendbuf, recvbuf, countPerRank, dtype, ReduceOp::Sum, -1,
                 options),
        false);
}
WorkPtr Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t countPerRank,
                                    DataType dtype, const CollectiveOptions& options) {
  return issue(makeCall(Collective::AllToAll, sendbuf, recvbuf, countPerRank, dtype, ReduceOp::Sum,
                        -1, options),
               true);
}
void Communicator::gather(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                          int root, const CollectiveOptions& options) {
  issue(makeCall(Collective::Gather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, root,
                 options),
        false);
}
WorkPtr Communicator::gatherAsync(const void* sendbuf, void* recvbuf, size_t sendCount,
                                  DataType dtype, int root, const CollectiveOptions& options) {
  return issue(makeCall(Collective::Gather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, root,
                        options),
               true);
}
void Communicator::scatter(const void* sendbuf, void* recvbuf, size_t recvCount, DataType dtype,
                           int root, const CollectiveOptions& options) {
  issue(makeCall(Collective::Scatter, sendbuf, recvbuf, recvCount, dtype, ReduceOp::Sum, root,
                 options),
        false);
}
WorkPtr Communicator::scatterAsync(const void* sendbuf, void* recvbuf, size_t recvCount,
                                   DataType dtype, int root, const CollectiveOptions& options) {
  return issue(makeCall(Collective::Scatter, sendbuf, recvbuf, recvCount, dtype, ReduceOp::Sum,
                        root, options),
               true);
}
// ---- the uneven collectives: their counts travel with the call -------------------------

namespace {

using Counts = std::span<const size_t>;

std::vector<size_t> vec(Counts c) { return std::vector<size_t>(c.begin(), c.end()); }

// The caller's displacements, or packed ones (prefix sums of the counts) when it gave none.
std::vector<size_t> displsOf(Counts counts, Counts displs) {
  if (!displs.empty()) return vec(displs);
  std::vector<size_t> packed(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) packed[p] = packed[p - 1] + counts[p - 1];
  return packed;
}

PreparedCall makeVCall(Collective kind, const void* in, void* out, size_t count, DataType dtype,
                       ReduceOp op, int root, const CollectiveOptions& o, algo::VCounts v) {
  PreparedCall c = makeCall(kind, in, out, count, dtype, op, root, o);
  c.v = std::make_shared<const algo::VCounts>(std::move(v));
  return c;
}

algo::VCounts recvSide(Counts counts, Counts displs) {
  algo::VCounts v;
  v.recvCounts = vec(counts);
  v.recvDispls = displsOf(counts, displs);
  return v;
}

algo::VCounts sendSide(Counts counts, Counts displs) {
  algo::VCounts v;
  v.sendCounts = vec(counts);
  v.sendDispls = displsOf(counts, displs);
  return v;
}

// This rank's count of a reduce_scatter_v (0 where the counts are malformed: validation
// names that).
size_t own(Counts counts, int rank) {
  return static_cast<size_t>(rank) < counts.size() ? counts[static_cast<size_t>(rank)] : 0;
}

PreparedCall allToAllVCall(const void* in, Counts sc, Counts sd, void* out, Counts rc, Counts rd,
                           DataType dtype, const CollectiveOptions& o) {
  algo::VCounts v = sendSide(sc, sd);
  algo::VCounts r = recvSide(rc, rd);
  v.recvCounts = std::move(r.recvCounts);
  v.recvDispls = std::move(r.recvDispls);
  size_t total = 0;
  for (size_t x : sc) total += x;
  return makeVCall(Collective::AllToAllV, in, out, total, dtype, ReduceOp::Sum, -1, o,
                   std::move(v));
}

}  // namespace

void Communicator::allGatherV(const void* sendbuf, size_t sendCount, void* recvbuf,
                              Counts recvCounts, Counts recvDispls, DataType dtype,
                              const CollectiveOptions& options) {
  issue(makeVCall(Collective::AllGatherV, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, -1,
                  options, recvSide(recvCounts, recvDispls)),
        false);
}
WorkPtr Communicator::allGatherVAsync(const void* sendbuf, size_t sendCount, void* recvbuf,
                                      Counts recvCounts, Counts recvDispls, DataType dtype,
                                      const CollectiveOptions& options) {
  return issue(makeVCall(Collective::AllGatherV, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum,
                         -1, options, recvSide(recvCounts, recvDispls)),
               true);
}
void Communicator::reduceScatterV(const void* sendbuf, void* recvbuf, Counts recvCounts,
                                  DataType dtype, ReduceOp op, const CollectiveOptions& options) {
  issue(makeVCall(Collective::ReduceScatterV, sendbuf, recvbuf, own(recvCounts, rank()), dtype, op,
                  -1, options, recvSide(recvCounts, {})),
        false);
}
WorkPtr Communicator::reduceScatterVAsync(const void* sendbuf, void* recvbuf, Counts recvCounts,
                                          DataType dtype, ReduceOp op,
                                          const CollectiveOptions& options) {
  return issue(makeVCall(Collective::ReduceScatterV, sendbuf, recvbuf, own(recvCounts, rank()),
                         dtype, op, -1, options, recvSide(recvCounts, {})),
               true);
}
void Communicator::allToAllV(const void* sendbuf, Counts sendCounts, Counts sendDispls,
                             void* recvbuf, Counts recvCounts, Counts recvDispls, DataType dtype,
                             const CollectiveOptions& options) {
  issue(allToAllVCall(sendbuf, sendCounts, sendDispls, recvbuf, recvCounts, recvDispls, dtype,
                      options),
        false);
}
WorkPtr Communicator::allToAllVAsync(const void* sendbuf, Counts sendCounts, Counts sendDispls,
                                     void* recvbuf, Counts recvCounts, Counts recvDispls,
                                     DataType dtype, const CollectiveOptions& options) {
  return issue(allToAllVCall(sendbuf, sendCounts, sendDispls, recvbuf, recvCounts, recvDispls,
                             dtype, options),
               true);
}
void Communicator::gatherV(const void* sendbuf, size_t sendCount, void* recvbuf, Counts recvCounts,
                           Counts recvDispls, DataType dtype, int root,
                           const CollectiveOptions& options) {
  issue(makeVCall(Collective::GatherV, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, root,
                  options, recvSide(recvCounts, recvDispls)),
        false);
}
WorkPtr Communicator::gatherVAsync(const void* sendbuf, size_t sendCount, void* recvbuf,
                                   Counts recvCounts, Counts recvDispls, DataType dtype, int root,
                                   const CollectiveOptions& options) {
  return issue(makeVCall(Collective::GatherV, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum,
                         root, options, recvSide(recvCounts, recvDispls)),
               true);
}
void Communicator::scatterV(const void* sendbuf, Counts sendCounts, Counts sendDispls,
                            void* recvbuf, size_t recvCount, DataType dtype, int root,
                            const CollectiveOptions& options) {
  issue(makeVCall(Collective::ScatterV, sendbuf, recvbuf, recvCount, dtype, ReduceOp::Sum, root,
                  options, sendSide(sendCounts, sendDispls)),
        false);
}
WorkPtr Communicator::scatterVAsync(const void* sendbuf, Counts sendCounts, Counts sendDispls,
                                    void* recvbuf, size_t recvCount, DataType dtype, int root,
                                    const CollectiveOptions& options) {
  return issue(makeVCall(Collective::ScatterV, sendbuf, recvbuf, recvCount, dtype, ReduceOp::Sum,
                         root, options, sendSide(sendCounts, sendDispls)),
               true);
}

// ---- failures (failure_protocol.cpp) -----------------------------------------------------

void Communicator::abort(const std::string& reason) { impl_->abortNow(reason); }

std::optional<ErrorInfo> Communicator::abortCause() const { return impl_->currentAbortCause(); }

const std::vector<int>& Communicator::originalRanks() const { return impl_->boot.originalRanks; }

Communicator Communicator::shrink(std::optional<std::chrono::milliseconds> timeout) {
  Impl& m = *impl_;
  if (timeout) {
    config::checkTimeout("shrink: a timeout of " + std::to_string(timeout->count()) + " ms",
                         timeout->count(), m.boot.rank);
  }
  const auto wait = timeout.value_or(m.boot.timeout);
  const std::vector<int> members = m.agreeOnSurvivors(wait);
  auto me = std::find(members.begin(), members.end(), m.boot.rank);
  if (me == members.end()) {
    throwError(ErrorKind::Timeout,
               "shrink: this rank arrived after the survivors had agreed on the members",
               m.boot.rank);
  }
  const std::string name = m.boot.options.name + ".shrink" + std::to_string(m.failure.shrinks - 1);
  const int newRank = static_cast<int>(me - members.begin());
  TCCL_INFO("shrink: " << members.size() << " of " << m.boot.size << " ranks remain; rank "
                       << m.boot.rank << " becomes " << newRank);
  // Attached to this family (split.cpp): the same listener and heartbeat thread.
  Communicator next(m.attachChild(name, members, newRank));
  for (size_t i = 0; i < members.size(); ++i)
    next.impl_->boot.originalRanks[i] = m.boot.originalRanks[static_cast<size_t>(members[i])];
  // A store server this rank hosts must outlive the new communicator too, which now
  // waits for the survivors' exits in its place.
  next.impl_->boot.waitForExits = m.boot.waitForExits;
  m.boot.waitForExits = false;
  return next;
}

}  // namespace tccl
