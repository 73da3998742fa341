#include "tccl/communicator.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "algorithms/allreduce.hpp"
#include "algorithms/collectives.hpp"
#include "algorithms/schedule.hpp"
#include "algorithms/select.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "core/bootstrap.hpp"
#include "core/failure.hpp"
#include "core/launch_env.hpp"
#include "core/topology.hpp"
#include "exec/executor.hpp"
#include "net/iface.hpp"
#include "net/socket.hpp"
#include "reduce/reduce.hpp"
#include "transport/transport.hpp"
#include "transport/wire.hpp"

namespace tccl {
namespace {

// The cores this process may run on (its affinity mask), at least 1.
int onlineCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

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

namespace {

enum class Kind : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Reduce,
  Barrier,
  AllToAll,
  Gather,
  Scatter,
  Send,
  Recv,
};

const char* kindName(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return "allreduce";
    case Kind::ReduceScatter:
      return "reduce_scatter";
    case Kind::AllGather:
      return "allgather";
    case Kind::Broadcast:
      return "broadcast";
    case Kind::Reduce:
      return "reduce";
    case Kind::Barrier:
      return "barrier";
    case Kind::AllToAll:
      return "alltoall";
    case Kind::Gather:
      return "gather";
    case Kind::Scatter:
      return "scatter";
    case Kind::Send:
      return "send";
    case Kind::Recv:
      return "recv";
  }
  return "?";
}

bool isP2P(Kind k) { return k == Kind::Send || k == Kind::Recv; }

}  // namespace

// A call that passed validation and has its place in the issue order.
struct PreparedCall {
  Kind kind = Kind::AllReduce;
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  size_t count = 0;  // per rank (see each collective's convention)
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;  // root, or the peer of a send/recv
  Algorithm algorithm = Algorithm::Ring;
  std::string why = "requested";
  std::optional<std::chrono::milliseconds> timeout;
  int64_t seq = -1;  // collectives: the communicator's sequence; p2p: per peer and direction
};

// What a rank is running now, for its heartbeat record (formatted by that thread).
struct Running {
  Kind kind = Kind::AllReduce;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;
  Algorithm algorithm = Algorithm::Ring;
  uint32_t fingerprint = 0;
  // The heartbeat period during this call: shorter than the communicator's when the
  // call's own timeout is (so that a silent peer is still found within 2x of it).
  std::chrono::milliseconds period{0};
};

std::string describe(int64_t seq, const Running& r) {
  std::ostringstream os;
  os << kindName(r.kind) << " #" << seq << " " << toString(r.dtype) << " x" << r.count;
  if (r.kind == Kind::AllReduce || r.kind == Kind::ReduceScatter || r.kind == Kind::Reduce)
    os << " " << toString(r.op);
  if (r.root >= 0) os << " root " << r.root;
  os << " " << toString(r.algorithm);
  return os.str();
}

struct Communicator::Impl {
  std::shared_ptr<Store> userStore;
  std::shared_ptr<Store> store;  // namespaced
  // The heartbeat thread's own connection when the store is a TcpStore, so that a
  // long store wait on the caller's thread never holds up a heartbeat.
  std::shared_ptr<Store> hbStore;
  std::unique_ptr<TcpStoreServer> ownedServer;
  bool joined = false;  // construction completed
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
  std::unique_ptr<Topology> topology;  // which ranks share a host (core/topology.hpp)
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
  std::deque<std::pair<PreparedCall, WorkPtr>> queue;
  std::map<int, int64_t> sendSeq, recvSeq;  // point-to-point sequence per peer
  std::vector<uint8_t> scratch;             // for schedules that need it
  bool busy = false;
  bool stopping = false;
  std::thread progress;
  std::mutex execMu;
  // auto's last all-reduce choice (guarded by execMu): a training loop all-reduces the
  // same sizes over and over, and the model's answer for a size never changes.
  size_t autoMemoBytes = SIZE_MAX;
  Algorithm autoMemoAlgo = Algorithm::Ring;

  // ---- failure handling (docs/errors.md) ----
  // Set with abortCause; read by the executor, which also polls wakeFd (an eventfd
  // made readable on abort) so that an abort from another thread ends its wait.
  std::atomic<bool> abortFlag{false};
  int wakeFd = -1;
  std::optional<FaultSpec> fault;         // TCCL_FAULT
  std::chrono::milliseconds hbPeriod{0};  // 0: no heartbeats
  std::thread heartbeat;
  std::mutex hbMu;  // guards hbStop, running, enteredSeq, completedSeq (leaf lock)
  std::condition_variable hbCv;
  bool hbStop = false;
  Running running;
  // The last few collectives this rank ran: published when it fails, so a decider
  // comparing signatures of collective #k finds this rank's even if it has moved on.
  static constexpr size_t kRecent = 4;
  std::array<std::pair<int64_t, Running>, kRecent> recent{};
  int64_t enteredSeq = -1;
  int64_t completedSeq = -1;
  int shrinks = 0;
  std::vector<int> originalRanks;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(issueMu);
      stopping = true;
    }
    queueCv.notify_all();
    if (progress.joinable()) progress.join();  // drains the queue first
    stopHeartbeat();
    leaveStore();
    if (wakeFd >= 0) ::close(wakeFd);
  }

  void stopHeartbeat() {
    {
      std::lock_guard<std::mutex> lk(hbMu);
      hbStop = true;
    }
    hbCv.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }

  void wake() {
    abortFlag.store(true);
    if (wakeFd >= 0) {
      uint64_t one = 1;
      ssize_t n = ::write(wakeFd, &one, sizeof one);
      (void)n;
    }
  }

  // Records the first fatal error; returns the one that stands.
  ErrorInfo setAbortCause(const ErrorInfo& info) {
    std::lock_guard<std::mutex> lk(abortMu);
    if (!abortCause) abortCause = info;
    return *abortCause;
  }

  std::optional<ErrorInfo> currentAbortCause() const {
    std::lock_guard<std::mutex> lk(abortMu);
    return abortCause;
  }

  std::string key(const char* prefix, int64_t a) const { return prefix + std::to_string(a); }

  failure::Heartbeat ownHeartbeat(int64_t beat) {
    failure::Heartbeat h;
    h.beat = beat;
    std::lock_guard<std::mutex> lk(hbMu);
    h.entered = enteredSeq;
    h.completed = completedSeq;
    if (enteredSeq >= 0) {
      h.fingerprint = running.fingerprint;
      h.signature = describe(enteredSeq, running);
    }
    for (const auto& [seqNo, r] : recent) {
      if (r.fingerprint != 0) h.recent.push_back({seqNo, r.fingerprint, describe(seqNo, r)});
    }
    std::sort(h.recent.begin(), h.recent.end(),
              [](const auto& a, const auto& b) { return a.seq < b.seq; });
    return h;
  }

  // Every other rank's heartbeat record now (absent: none published).
  std::map<int, failure::Heartbeat> readHeartbeats(Store& from) {
    std::map<int, failure::Heartbeat> out;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      try {
        const std::string k = key("hb/", r);
        if (!from.check({k})) continue;
        if (auto h = failure::decodeHeartbeat(from.getString(k))) out[r] = *h;
      } catch (const std::exception&) {
      }
    }
    return out;
  }

  void heartbeatLoop();
  bool claim(Store& via);
  void publishCause(Store& via, const ErrorInfo& cause);
  std::optional<ErrorInfo> awaitCause(std::chrono::milliseconds bound);
  // What every rank ran at collectives #lo..#hi (seq -> rank -> fingerprint and
  // signature), once each rank has published its recent ones (sigmax/<rank>), or
  // when `bound` has passed.
  using SigTable = std::map<int64_t, std::map<int, std::pair<uint32_t, std::string>>>;
  SigTable awaitSignatures(int64_t lo, int64_t hi, std::chrono::milliseconds bound);
  [[noreturn]] void failCall(const Error& e, const PreparedCall& call, const Running& what);
  ErrorInfo decideCause(const ErrorInfo& local, const PreparedCall& call, const Running& what,
                        bool claimed);

  // Every rank counts itself out of the store; the rank that hosts the store server
  // (fromEnv with MASTER_ADDR) waits, for a bounded time, until every rank has, so that
  // its exit does not pull the store from under ranks still using it.
  void leaveStore() noexcept {
    if (!joined) return;  // the constructor failed: this rank never joined
    try {
      int64_t left = store->add("exited", 1);
      if (!ownedServer) return;
      // After a failure the culprit may never count itself out: wait less, and for
      // one rank fewer.
      const bool failed = currentAbortCause().has_value();
      const auto until =
          Deadline::Clock::now() + (failed ? std::chrono::seconds(5) : std::chrono::seconds(30));
      while (left < size - (failed ? 1 : 0) && Deadline::Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        left = store->add("exited", 0);
      }
    } catch (...) {
      // The store is gone or broken: nothing left to wait for.
    }
  }

  void progressLoop();
  void execute(PreparedCall& call, CallStats* stats);
  // Auto's all-reduce choice (TCCL_ALGO, else the cost model over this job's hosts).
  Algorithm chooseAllreduce(size_t bytes, std::string* why) const;

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
  // Rank 0's link model travels with it, so that Auto picks the same algorithm on every
  // rank whatever each host's tune file or environment says.
  if (rank == 0) {
    uint64_t id = randomJobId();
    if (auto env = config::getEnv("TCCL_JOB_ID")) id = wire::hash64(*env);
    // Rank 0's cores: the cost model's oversubscription term uses the same figure on
    // every rank (TCCL_CORES overrides, for tests and for cgroup-limited containers).
    m.model.cores =
        static_cast<int>(config::getEnvInt("TCCL_CORES", 1, 1 << 20).value_or(onlineCores()));
    char buf[256];
    std::snprintf(buf, sizeof buf, "%llu %.17g %.17g %.17g %.17g %.17g %.17g %d",
                  static_cast<unsigned long long>(id), m.model.alphaSec, m.model.betaSecPerByte,
                  m.model.hdBandwidthPenalty, m.model.interAlphaSec, m.model.interBetaSecPerByte,
                  m.model.gammaSecPerByte, m.model.cores);
    m.store->setString("jobid", buf);
    m.jobId = id;
  } else {
    m.store->wait({"jobid"}, m.timeout.count() > 0 ? m.timeout : Store::kDefaultTimeout);
    std::istringstream is(m.store->getString("jobid"));
    unsigned long long id = 0;
    is >> id >> m.model.alphaSec >> m.model.betaSecPerByte >> m.model.hdBandwidthPenalty >>
        m.model.interAlphaSec >> m.model.interBetaSecPerByte >> m.model.gammaSecPerByte >>
        m.model.cores;
    if (!is) throwError(ErrorKind::Store, "malformed job record in the store", rank);
    m.jobId = id;
  }

  TransportConfig tc;
  tc.rank = rank;
  tc.worldSize = size;
  tc.jobId = m.jobId;
  tc.commId = wire::hash64(options.name);
  tc.socketBufferBytes = config::socketBufferBytes();
  {
    // Where to listen and publish: CommOptions::listenAddress, else TCCL_SOCKET_IFNAME /
    // TCCL_SOCKET_FAMILY, else this host's end of the route to the store; loopback is
    // refused when the job may span hosts (src/net/iface.hpp, docs/network.md).
    std::string route;
    if (auto* tcp = dynamic_cast<TcpStore*>(store.get())) route = tcp->localAddress();
    tc.listenAddress =
        bootstrap::decideListenAddress(options.listenAddress, route, *m.store, rank, size,
                                       m.timeout.count() > 0 ? m.timeout : Store::kDefaultTimeout);
  }
  m.transport = std::make_unique<Transport>(tc, m.store);
  m.topology =
      std::make_unique<Topology>(m.store, rank, size, m.transport->listenAddress(), m.timeout);
  m.joined = true;
  m.originalRanks.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) m.originalRanks[static_cast<size_t>(r)] = r;
  m.wakeFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  m.transport->setInterrupt(m.wakeFd, &m.abortFlag);
  if (auto spec = config::getEnv("TCCL_FAULT")) {
    std::string err;
    m.fault = FaultSpec::parse(*spec, &err);
    if (!m.fault) throwError(ErrorKind::InvalidArgument, err, rank);
  }
  // Heartbeats: a period a tenth of the timeout, within [50 ms, 1 s]; published once
  // before the constructor returns, so that "no record" means "not running".
  {
    int64_t period = std::clamp<int64_t>(m.timeout.count() / 10, 50, 1000);
    if (m.timeout.count() <= 0) period = 1000;
    if (auto env = config::getEnvInt("TCCL_HEARTBEAT_MS", 0, 3600000)) period = *env;
    m.hbPeriod = std::chrono::milliseconds(size > 1 ? period : 0);
    if (m.hbPeriod.count() > 0) {
      m.hbStore = m.store;
      if (auto* tcp = dynamic_cast<TcpStore*>(store.get())) {
        m.hbStore = std::make_shared<PrefixStore>(
            "tccl/" + options.name, std::make_shared<TcpStore>(tcp->host(), tcp->port()));
      }
      m.store->setString(m.key("hb/", rank), failure::encodeHeartbeat(m.ownHeartbeat(0)));
      m.heartbeat = std::thread([&m] { m.heartbeatLoop(); });
    }
  }
  if (options.measureLinks || config::getEnv("TCCL_TUNE").value_or("") == "startup") measureLinks();
  TCCL_INFO("communicator '" << options.name << "' rank " << rank << "/" << size << " job "
                             << std::hex << m.jobId << std::dec << " segment " << m.segmentBytes
                             << " B timeout " << m.timeout.count() << " ms");
}

Communicator Communicator::fromEnv(CommOptions options) {
  // Rank, world size and store from whichever launcher started us (tccl launch, torchrun,
  // mpirun, srun); the precedence is in src/core/launch_env.hpp and docs/launch.md.
  const launch::LaunchEnv env = launch::resolveLaunchEnv();
  TCCL_INFO("fromEnv: " << env.describe());
  auto timeout = config::timeoutMs();
  std::chrono::milliseconds connectTimeout = timeout && *timeout > 0
                                                 ? std::chrono::milliseconds(*timeout)
                                                 : std::chrono::milliseconds(60000);
  std::unique_ptr<TcpStoreServer> server;
  if (env.hostsStore) server = std::make_unique<TcpStoreServer>(env.storeHost, env.storePort);
  auto store = std::make_shared<TcpStore>(env.storeHost, env.storePort, connectTimeout);
  Communicator comm(store, env.rank, env.worldSize, std::move(options));
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

LinkEstimate Communicator::linkModel() const {
  return {impl_->model.alphaSec * 1e6, 1e-9 / impl_->model.betaSecPerByte};
}

LinkEstimate Communicator::measureLinks(int iterations, size_t bandwidthBytes) {
  Impl& m = *impl_;
  double est[2] = {m.model.alphaSec, m.model.betaSecPerByte};
  if (m.size > 1 && m.rank <= 1) {
    // Ranks 0 and 1: ping-pong of 8 bytes for the per-message time (half a round trip),
    // then bandwidthBytes each way for the per-byte time.
    const int peer = 1 - m.rank;
    std::vector<uint8_t> small(8), big(bandwidthBytes);
    auto pingPong = [&](std::vector<uint8_t>& buf) {
      if (m.rank == 0) {
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
  m.model.alphaSec = est[0];
  m.model.betaSecPerByte = est[1];
  TCCL_INFO("measured links: alpha " << est[0] * 1e6 << " us, " << 1e-9 / est[1] << " GB/s");
  return linkModel();
}

Algorithm Communicator::chooseAllreduceAlgorithm(size_t bytes, std::string* why) const {
  return impl_->chooseAllreduce(bytes, why);
}

Algorithm Communicator::Impl::chooseAllreduce(size_t bytes, std::string* why) const {
  if (envAlgorithm && *envAlgorithm != Algorithm::Auto) {
    if (why) *why = "TCCL_ALGO";
    return *envAlgorithm;
  }
  // More than one rank: the hosts matter (read from the store on first use, which
  // waits until every rank has published its host).
  return algo::chooseAllreduce(size, bytes, model, why, size > 1 ? &topology->costs() : nullptr);
}

// ---- validation ------------------------------------------------------------------------

namespace {

bool overlaps(const uint8_t* a, size_t an, const uint8_t* b, size_t bn) {
  return a != nullptr && b != nullptr && an > 0 && bn > 0 && a < b + bn && b < a + an;
}

}  // namespace

WorkPtr Communicator::issue(PreparedCall&& call, bool async) {
  Impl& m = *impl_;
  const char* name = kindName(call.kind);
  m.checkUsable();
  auto invalid = [&](const std::string& why) { m.invalid(std::string(name) + ": " + why); };
  if (!isValid(call.dtype))
    invalid("unknown dtype " + std::to_string(static_cast<int>(call.dtype)));
  if (!isValid(call.op)) invalid("unknown reduce op " + std::to_string(static_cast<int>(call.op)));
  const size_t elem = dataTypeSize(call.dtype);
  const size_t n = static_cast<size_t>(m.size);
  if (call.count > (size_t{1} << 62) / elem / n)
    invalid("count " + std::to_string(call.count) + " too large");
  const size_t block = call.count * elem;  // bytes per rank's block
  const bool rooted = call.kind == Kind::Broadcast || call.kind == Kind::Reduce ||
                      call.kind == Kind::Gather || call.kind == Kind::Scatter;
  if (rooted && (call.root < 0 || call.root >= m.size)) {
    invalid("root " + std::to_string(call.root) + " not in [0, " + std::to_string(m.size) + ")");
  }
  if (isP2P(call.kind) && (call.root < 0 || call.root >= m.size || call.root == m.rank)) {
    invalid("peer " + std::to_string(call.root) + " must be another rank in [0, " +
            std::to_string(m.size) + ")");
  }
  const bool isRoot = call.root == m.rank;
  // Bytes each buffer must hold on this rank (0: not used here).
  size_t inBytes = block, outBytes = block;
  switch (call.kind) {
    case Kind::AllReduce:
      break;
    case Kind::ReduceScatter:
      inBytes = block * n;
      break;
    case Kind::AllGather:
      outBytes = block * n;
      break;
    case Kind::Broadcast:
      inBytes = isRoot ? block : 0;
      break;
    case Kind::Reduce:
      outBytes = isRoot ? block : 0;
      break;
    case Kind::Barrier:
      inBytes = outBytes = 0;
      break;
    case Kind::AllToAll:
      inBytes = outBytes = block * n;
      break;
    case Kind::Gather:
      outBytes = isRoot ? block * n : 0;
      break;
    case Kind::Scatter:
      inBytes = isRoot ? block * n : 0;
      break;
    case Kind::Send:
      outBytes = 0;
      break;
    case Kind::Recv:
      inBytes = 0;
      break;
  }
  if ((inBytes > 0 && call.in == nullptr) || (outBytes > 0 && call.out == nullptr)) {
    invalid("null buffer with count > 0");
  }
  // In place is allowed where a collective defines it; any other overlap is an error.
  bool inPlace = call.in == call.out;
  if (call.kind == Kind::AllGather || call.kind == Kind::Gather) {
    inPlace = call.out != nullptr && call.in == call.out + static_cast<size_t>(m.rank) * block;
  }
  if (call.kind == Kind::ReduceScatter || call.kind == Kind::Scatter) {
    inPlace = call.in != nullptr && call.out == call.in + static_cast<size_t>(m.rank) * block;
  }
  if (call.kind == Kind::AllToAll && inBytes > 0 && call.in == call.out) {
    invalid("in-place all-to-all is not supported: use distinct buffers");
  }
  if (!inPlace && overlaps(call.in, inBytes, call.out, outBytes)) {
    invalid("input and output overlap without being the collective's in-place layout");
  }

  // Algorithm. The explanation (every candidate's predicted time) is formatted only when
  // it will be logged: on an 8-byte call it would cost more than a tenth of the call.
  std::string* explain = log::enabled(log::Level::Info) ? &call.why : nullptr;
  if (!explain) call.why.clear();
  auto allowed = [&](std::initializer_list<Algorithm> algos) {
    if (call.algorithm == Algorithm::Auto) return;
    for (Algorithm a : algos) {
      if (a == call.algorithm) return;
    }
    invalid("algorithm " + std::string(toString(call.algorithm)) + " is not available here");
  };
  switch (call.kind) {
    case Kind::AllReduce:
      // Auto is decided when the call runs (execute): the cost model needs the hosts,
      // read from the store once every rank has joined, and an asynchronous call must
      // not wait for that here. Every rank decides alike wherever it decides.
      if (call.algorithm != Algorithm::Auto &&
          std::find(algo::allreduceAlgorithms().begin(), algo::allreduceAlgorithms().end(),
                    call.algorithm) == algo::allreduceAlgorithms().end()) {
        invalid("algorithm " + std::string(toString(call.algorithm)) + " is not available here");
      }
      if (m.size == 1) call.algorithm = Algorithm::Ring;  // nothing moves
      break;
    case Kind::Broadcast:
      allowed({Algorithm::Tree, Algorithm::Ring});
      if (call.algorithm == Algorithm::Auto) {
        call.algorithm = algo::chooseBroadcast(m.size, block, m.segmentBytes, m.model, explain);
      }
      break;
    case Kind::ReduceScatter:
    case Kind::AllGather:
      allowed({Algorithm::Ring});
      call.algorithm = Algorithm::Ring;
      break;
    case Kind::Reduce:
      allowed({Algorithm::Tree});
      call.algorithm = Algorithm::Tree;
      break;
    default:
      allowed({});
      call.algorithm = Algorithm::Auto;
      break;
  }

  std::unique_lock<std::mutex> issueLock(m.issueMu);
  if (call.kind == Kind::Send) {
    call.seq = m.sendSeq[call.root]++;
  } else if (call.kind == Kind::Recv) {
    call.seq = m.recvSeq[call.root]++;
  } else {
    call.seq = m.seq++;
  }
  if (!async && m.queue.empty() && !m.busy) {
    // Nothing queued: run on this thread. Taking execMu before releasing issueMu keeps
    // anything issued after this call from running before it.
    std::lock_guard<std::mutex> exec(m.execMu);
    issueLock.unlock();
    CallStats stats;
    m.execute(call, &stats);
    m.last = std::move(stats);
    return nullptr;
  }
  auto work = std::make_shared<Work>(name, call.seq, m.rank);
  m.queue.emplace_back(std::move(call), work);
  if (!m.progress.joinable()) m.progress = std::thread([&m] { m.progressLoop(); });
  issueLock.unlock();
  m.queueCv.notify_all();
  if (async) return work;
  // Asynchronous work is queued ahead of this blocking call: wait for its turn.
  work->wait();
  m.last = work->stats();
  return nullptr;
}

// ---- the public calls: each fills a PreparedCall --------------------------------------

namespace {

PreparedCall makeCall(Kind kind, const void* in, void* out, size_t count, DataType dtype,
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
  issue(makeCall(Kind::AllReduce, sendbuf, recvbuf, count, dtype, op, -1, options), false);
}
WorkPtr Communicator::allreduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, ReduceOp op, const AllreduceOptions& options) {
  return issue(makeCall(Kind::AllReduce, sendbuf, recvbuf, count, dtype, op, -1, options), true);
}
void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t recvCount,
                                 DataType dtype, ReduceOp op, const CollectiveOptions& options) {
  issue(makeCall(Kind::ReduceScatter, sendbuf, recvbuf, recvCount, dtype, op, -1, options), false);
}
WorkPtr Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvCount,
                                         DataType dtype, ReduceOp op,
                                         const CollectiveOptions& options) {
  return issue(makeCall(Kind::ReduceScatter, sendbuf, recvbuf, recvCount, dtype, op, -1, options),
               true);
}
void Communicator::allGather(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                             const CollectiveOptions& options) {
  issue(makeCall(Kind::AllGather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, -1, options),
        false);
}
WorkPtr Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendCount,
                                     DataType dtype, const CollectiveOptions& options) {
  return issue(
      makeCall(Kind::AllGather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, -1, options),
      true);
}
void Communicator::broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             int root, const CollectiveOptions& options) {
  issue(makeCall(Kind::Broadcast, sendbuf, recvbuf, count, dtype, ReduceOp::Sum, root, options),
        false);
}
WorkPtr Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, int root, const CollectiveOptions& options) {
  return issue(
      makeCall(Kind::Broadcast, sendbuf, recvbuf, count, dtype, ReduceOp::Sum, root, options),
      true);
}
void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          ReduceOp op, int root, const CollectiveOptions& options) {
  issue(makeCall(Kind::Reduce, sendbuf, recvbuf, count, dtype, op, root, options), false);
}
WorkPtr Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                  ReduceOp op, int root, const CollectiveOptions& options) {
  return issue(makeCall(Kind::Reduce, sendbuf, recvbuf, count, dtype, op, root, options), true);
}
void Communicator::barrier(const CollectiveOptions& options) {
  issue(makeCall(Kind::Barrier, nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum, -1, options),
        false);
}
WorkPtr Communicator::barrierAsync(const CollectiveOptions& options) {
  return issue(
      makeCall(Kind::Barrier, nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum, -1, options),
      true);
}
void Communicator::allToAll(const void* sendbuf, void* recvbuf, size_t countPerRank, DataType dtype,
                            const CollectiveOptions& options) {
  issue(makeCall(Kind::AllToAll, sendbuf, recvbuf, countPerRank, dtype, ReduceOp::Sum, -1, options),
        false);
}
WorkPtr Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t countPerRank,
                                    DataType dtype, const CollectiveOptions& options) {
  return issue(
      makeCall(Kind::AllToAll, sendbuf, recvbuf, countPerRank, dtype, ReduceOp::Sum, -1, options),
      true);
}
void Communicator::gather(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                          int root, const CollectiveOptions& options) {
  issue(makeCall(Kind::Gather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, root, options),
        false);
}
WorkPtr Communicator::gatherAsync(const void* sendbuf, void* recvbuf, size_t sendCount,
                                  DataType dtype, int root, const CollectiveOptions& options) {
  return issue(
      makeCall(Kind::Gather, sendbuf, recvbuf, sendCount, dtype, ReduceOp::Sum, root, options),
      true);
}
void Communicator::scatter(const void* sendbuf, void* recvbuf, size_t recvCount, DataType dtype,
                           int root, const CollectiveOptions& options) {
  issue(makeCall(Kind::Scatter, sendbuf, recvbuf, recvCount, dtype, ReduceOp::Sum, root, options),
        false);
}
WorkPtr Communicator::scatterAsync(const void* sendbuf, void* recvbuf, size_t recvCount,
                                   DataType dtype, int root, const CollectiveOptions& options) {
  return issue(
      makeCall(Kind::Scatter, sendbuf, recvbuf, recvCount, dtype, ReduceOp::Sum, root, options),
      true);
}
void Communicator::send(const void* buf, size_t count, DataType dtype, int peer,
                        const CollectiveOptions& options) {
  issue(makeCall(Kind::Send, buf, nullptr, count, dtype, ReduceOp::Sum, peer, options), false);
}
void Communicator::recv(void* buf, size_t count, DataType dtype, int peer,
                        const CollectiveOptions& options) {
  issue(makeCall(Kind::Recv, nullptr, buf, count, dtype, ReduceOp::Sum, peer, options), false);
}
WorkPtr Communicator::sendAsync(const void* buf, size_t count, DataType dtype, int peer,
                                const CollectiveOptions& options) {
  return issue(makeCall(Kind::Send, buf, nullptr, count, dtype, ReduceOp::Sum, peer, options),
               true);
}
WorkPtr Communicator::recvAsync(void* buf, size_t count, DataType dtype, int peer,
                                const CollectiveOptions& options) {
  return issue(makeCall(Kind::Recv, nullptr, buf, count, dtype, ReduceOp::Sum, peer, options),
               true);
}

// ---- failures: heartbeats, the agreed cause, abort, shrink (docs/errors.md) ----------

void Communicator::Impl::heartbeatLoop() {
  int64_t beat = 0;
  int64_t stuckSeq = -1;  // the collective this rank has been inside for a while
  int stuckBeats = 0;
  std::unique_lock<std::mutex> lk(hbMu);
  for (;;) {
    const bool inCall = enteredSeq > completedSeq && running.period.count() > 0;
    const auto period = inCall ? std::min(hbPeriod, running.period) : hbPeriod;
    const int64_t seen = enteredSeq;
    // Wake early when a call with a shorter period starts.
    if (hbCv.wait_for(lk, period,
                      [&] { return hbStop || (enteredSeq != seen && running.period < period); }))
      if (hbStop) break;
    const int64_t entered = enteredSeq;
    const bool inside = enteredSeq > completedSeq;
    lk.unlock();
    try {
      hbStore->setString(key("hb/", rank), failure::encodeHeartbeat(ownHeartbeat(++beat)));
      if (!abortFlag.load() && hbStore->check({"abort/cause"})) {
        // Another rank decided: this rank fails too, at its next wait or call.
        if (auto cause = failure::decodeCause(hbStore->getString("abort/cause"))) {
          setAbortCause(*cause);
          wake();
        }
      }
      // A long wait inside a collective: compare what the ranks inside it run. Ranks
      // that chose different algorithms (a count mismatch under Auto, say) may never
      // exchange a message that would show it.
      stuckBeats = inside && entered == stuckSeq ? stuckBeats + 1 : 0;
      stuckSeq = inside ? entered : -1;
      // From the first full period inside one collective, every period: the others'
      // records lag by up to a period, so a rank not yet in it is simply not compared.
      if (stuckBeats >= 1 && !abortFlag.load()) {
        const failure::Heartbeat self = ownHeartbeat(beat);
        std::map<int, uint32_t> fps{{rank, self.fingerprint}};
        auto others = readHeartbeats(*hbStore);
        for (const auto& [r, h] : others) {
          if (h.entered == entered) fps[r] = h.fingerprint;
        }
        int outlier = failure::majorityOutlier(fps, size);
        if (outlier >= 0 && claim(*hbStore)) {
          ErrorInfo c;
          c.kind = ErrorKind::Mismatch;
          c.rank = rank;
          c.detectedBy = rank;
          c.culprit = outlier;
          c.culpritAddress = transport->publishedAddress(outlier, hbStore.get());
          c.seq = entered;
          c.localSignature = self.signature;
          c.remoteSignature = outlier == rank ? self.signature : others[outlier].signature;
          c.message = "rank " + std::to_string(outlier) + " runs a different collective #" +
                      std::to_string(entered) + " than the other ranks (" + c.remoteSignature +
                      "), found by comparing heartbeats";
          publishCause(*hbStore, c);
          setAbortCause(c);
          wake();
        }
      }
    } catch (const std::exception&) {
      // The store is unreachable: nothing to publish to; the sockets still tell.
    }
    lk.lock();
  }
}

bool Communicator::Impl::claim(Store& via) {
  try {
    return via.add("abort/claim", 1) == 1;
  } catch (const std::exception&) {
    return true;  // no store to agree through: decide alone
  }
}

void Communicator::Impl::publishCause(Store& via, const ErrorInfo& cause) {
  try {
    via.setString("abort/cause", failure::encodeCause(cause));
  } catch (const std::exception&) {
  }
}

std::optional<ErrorInfo> Communicator::Impl::awaitCause(std::chrono::milliseconds bound) {
  try {
    store->wait({"abort/cause"}, bound);
    return failure::decodeCause(store->getString("abort/cause"));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Communicator::Impl::SigTable Communicator::Impl::awaitSignatures(int64_t lo, int64_t hi,
                                                                 std::chrono::milliseconds bound) {
  SigTable table;
  std::set<int> done;
  const auto until = Deadline::Clock::now() + bound;
  for (;;) {
    for (int r = 0; r < size; ++r) {
      if (done.count(r)) continue;
      try {
        // sigmax is written after the signatures: once it is there, they all are.
        if (!store->check({key("sigmax/", r)})) {
          // Not failed (yet): a rank already past #hi lists #lo..#hi in its heartbeat.
          const std::string hk = key("hb/", r);
          if (r == rank || hbPeriod.count() == 0 || !store->check({hk})) continue;
          auto h = failure::decodeHeartbeat(store->getString(hk));
          if (!h || h->entered < hi) continue;
          done.insert(r);
          for (const auto& p : h->recent) {
            if (p.seq >= lo && p.seq <= hi) table[p.seq][r] = {p.fingerprint, p.signature};
          }
          continue;
        }
        done.insert(r);
        for (int64_t q = std::max<int64_t>(lo, 0); q <= hi; ++q) {
          const std::string k = "sig/" + std::to_string(q) + "/" + std::to_string(r);
          if (!store->check({k})) continue;
          std::string v = store->getString(k);
          size_t sp = v.find(' ');
          table[q][r] = {static_cast<uint32_t>(std::stoul(v.substr(0, sp))),
                         sp == std::string::npos ? "" : v.substr(sp + 1)};
        }
      } catch (const std::exception&) {
      }
    }
    if (static_cast<int>(done.size()) == size || Deadline::Clock::now() >= until) return table;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The rank that claims first decides the cause and publishes it; the others wait
// for it. Every rank so reports the same culprit.
ErrorInfo Communicator::Impl::decideCause(const ErrorInfo& local, const PreparedCall& call,
                                          const Running& what, bool claimed) {
  const std::string mine = describe(call.seq, what);
  const auto period = what.period.count() > 0 ? std::min(hbPeriod, what.period) : hbPeriod;
  const auto callTimeout = call.timeout.value_or(timeout);
  const auto sigWait =
      std::clamp(callTimeout / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  if (!claimed) {
    if (auto cause = awaitCause(4 * period + sigWait + std::chrono::milliseconds(3000)))
      return *cause;
  }
  ErrorInfo c = local;
  c.rank = rank;
  c.detectedBy = rank;
  c.localSignature.clear();
  switch (local.kind) {
    case ErrorKind::Timeout: {
      if (hbPeriod.count() == 0) {
        c.culprit = local.peer;
        break;
      }
      // Three periods apart: a heartbeat thread of a loaded host may be late by a
      // period, and must not be taken for a stopped one.
      auto first = readHeartbeats(*store);
      std::this_thread::sleep_for(3 * period + std::chrono::milliseconds(50));
      auto second = readHeartbeats(*store);
      auto v =
          failure::judgeTimeout(rank, size, call.seq, what.fingerprint, first, second, local.peer);
      c.kind = v.kind;
      c.culprit = v.culprit;
      c.message = v.reason + "; this rank waited on rank " + std::to_string(local.peer) + ": " +
                  local.message;
      if (v.kind == ErrorKind::Mismatch) {
        c.localSignature = mine;
        if (second.count(v.culprit)) c.remoteSignature = second[v.culprit].signature;
      }
      break;
    }
    case ErrorKind::Mismatch: {
      // The first collective at which the ranks disagree names the odd one out: a rank
      // that skipped one disagrees there, even if later numbers line up again.
      const int64_t lo = call.seq - static_cast<int64_t>(kRecent) + 1;
      SigTable table = awaitSignatures(lo, call.seq, sigWait);
      std::map<int, std::pair<uint32_t, std::string>> sigs;
      int outlier = -1;
      for (auto& [q, atQ] : table) {
        std::map<int, uint32_t> fps;
        for (const auto& [r, sig] : atQ) fps[r] = sig.first;
        outlier = failure::majorityOutlier(fps, size);
        if (outlier >= 0) {
          sigs = atQ;
          c.seq = q;  // the collective the verdict is about
          break;
        }
      }
      if (outlier < 0) {
        sigs = table[call.seq];
        if (static_cast<int>(sigs.size()) < size && hbPeriod.count() > 0) {
          // A rank that has not failed yet (blocked elsewhere) did not publish: its
          // heartbeat tells what it runs now.
          for (const auto& [r, h] : readHeartbeats(*store)) {
            if (!sigs.count(r) && h.entered == call.seq) sigs[r] = {h.fingerprint, h.signature};
          }
        }
        std::map<int, uint32_t> fps;
        for (const auto& [r, sig] : sigs) fps[r] = sig.first;
        outlier = failure::majorityOutlier(fps, size);
      }
      std::map<int, uint32_t> fps;
      for (const auto& [r, sig] : sigs) fps[r] = sig.first;
      c.culprit = outlier >= 0 ? outlier : local.peer;
      // In the record: what the others called (local) and what the culprit called.
      c.localSignature = mine;
      for (const auto& [r, sig] : sigs) {
        if (sig.first != fps[c.culprit]) c.localSignature = sig.second;
      }
      if (sigs.count(c.culprit)) c.remoteSignature = sigs[c.culprit].second;
      c.message = "rank " + std::to_string(c.culprit) +
                  " called a different collective than the others (" +
                  (c.remoteSignature.empty() ? "?" : c.remoteSignature) + "); first seen by rank " +
                  std::to_string(rank) + ": " + local.message;
      break;
    }
    case ErrorKind::Aborted:
      // An abort message reached us before any cause was in the store.
      c.culprit = local.culprit >= 0 ? local.culprit : local.peer;
      break;
    default:
      c.culprit = local.peer;
      if (local.kind == ErrorKind::PeerClosed && local.peer >= 0)
        c.message = "rank " + std::to_string(local.peer) +
                    " closed its connections (the process exited or was killed): " + local.message;
      break;
  }
  if (c.culprit >= 0) {
    c.culpritAddress =
        c.culprit == rank ? transport->listenAddress() : transport->publishedAddress(c.culprit);
  }
  publishCause(*store, c);
  return c;
}

// A collective failed with `e`: tell the peers, agree on the cause, and throw it as
// seen from this rank.
void Communicator::Impl::failCall(const Error& e, const PreparedCall& call, const Running& what) {
  const ErrorInfo& local = e.info();
  std::optional<ErrorInfo> known = currentAbortCause();
  abortFlag.store(true);
  // Publish what this rank ran, and claim the decision, before any socket closes: a
  // peer that sees our abort then finds the claim taken and waits for our verdict
  // instead of blaming us.
  bool claimed = false;
  if (!known) {
    std::vector<std::pair<int64_t, Running>> ran;
    {
      std::lock_guard<std::mutex> lk(hbMu);
      for (const auto& entry : recent) {
        if (entry.second.fingerprint != 0) ran.push_back(entry);
      }
    }
    try {
      int64_t lastSeq = -1;
      for (const auto& [seqNo, r] : ran) {
        store->setString("sig/" + std::to_string(seqNo) + "/" + std::to_string(rank),
                         std::to_string(r.fingerprint) + " " + describe(seqNo, r));
        lastSeq = std::max(lastSeq, seqNo);
      }
      store->setString(key("sigmax/", rank), std::to_string(lastSeq));
    } catch (const std::exception&) {
    }
    claimed = claim(*store);
  }
  wire::MessageHeader ah;
  ah.kind = wire::MsgKind::Abort;
  ah.seq = static_cast<uint32_t>(call.seq);
  int hint = known ? known->culprit
                   : (local.kind == ErrorKind::PeerClosed || local.kind == ErrorKind::Protocol
                          ? local.peer
                          : local.culprit);
  ah.fingerprint = hint >= 0 ? static_cast<uint32_t>(hint) : wire::kNoCulprit;
  ah.step = static_cast<uint32_t>(known ? known->kind : local.kind);
  transport->abortAll(ah);
  const ErrorInfo cause = known ? *known : decideCause(local, call, what, claimed);
  ErrorInfo out = local;  // where this rank was: collective, phase, step, peer, bytes, time
  out.rank = rank;
  out.kind = cause.kind;
  out.message = cause.message;
  out.culprit = cause.culprit;
  out.culpritAddress = cause.culpritAddress;
  if (out.culpritAddress.empty() && out.culprit >= 0 && out.culprit < size) {
    out.culpritAddress =
        out.culprit == rank ? transport->listenAddress() : transport->publishedAddress(out.culprit);
  }
  out.detectedBy = cause.detectedBy;
  out.remoteSignature = cause.remoteSignature;
  out.localSignature.clear();
  if (cause.kind == ErrorKind::Mismatch) {
    out.localSignature = describe(call.seq, what);
    {
      // What this rank ran at the collective the verdict is about.
      std::lock_guard<std::mutex> lk(hbMu);
      const auto& entry = recent[static_cast<size_t>(std::max<int64_t>(cause.seq, 0)) % kRecent];
      if (cause.seq >= 0 && entry.first == cause.seq && entry.second.fingerprint != 0)
        out.localSignature = describe(cause.seq, entry.second);
    }
    // The culprit itself is shown what the others called.
    if (cause.culprit == rank) out.remoteSignature = cause.localSignature;
    if (out.remoteSignature.empty() && cause.culprit >= 0 && cause.seq >= 0) {
      // The decider did not have the culprit's signature; it publishes it when it
      // fails, which is about now.
      const std::string k =
          "sig/" + std::to_string(cause.seq) + "/" + std::to_string(cause.culprit);
      const auto until = Deadline::Clock::now() + std::chrono::milliseconds(500);
      try {
        while (!store->check({k}) && !store->check({key("sigmax/", cause.culprit)}) &&
               Deadline::Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        if (store->check({k})) {
          std::string v = store->getString(k);
          size_t sp = v.find(' ');
          if (sp != std::string::npos) out.remoteSignature = v.substr(sp + 1);
        }
        // It never ran collective #seq: say what it runs (or last ran) instead.
        const std::string hk = key("hb/", cause.culprit);
        if (out.remoteSignature.empty() && store->check({hk})) {
          auto h = failure::decodeHeartbeat(store->getString(hk));
          if (h && !h->signature.empty())
            out.remoteSignature =
                h->signature + " (its latest; it has no #" + std::to_string(cause.seq) + ")";
        }
      } catch (const std::exception&) {
      }
    }
  }
  if (out.collective.empty()) {
    out.collective = kindName(call.kind);
    out.seq = call.seq;
  }
  setAbortCause(out);
  throwError(std::move(out));
}

void Communicator::abort(const std::string& reason) {
  Impl& m = *impl_;
  if (m.currentAbortCause()) return;
  ErrorInfo c;
  c.kind = ErrorKind::Aborted;
  c.rank = m.rank;
  c.culprit = m.rank;
  c.detectedBy = m.rank;
  c.culpritAddress = m.transport->listenAddress();
  c.message = "rank " + std::to_string(m.rank) + " aborted the communicator: " + reason;
  if (m.claim(*m.store)) m.publishCause(*m.store, c);
  m.setAbortCause(c);
  m.wake();
  // Not inside a collective: end the connections now (else the executing thread
  // does, when the wake interrupts it).
  std::unique_lock<std::mutex> lk(m.execMu, std::try_to_lock);
  if (lk) {
    wire::MessageHeader ah;
    ah.kind = wire::MsgKind::Abort;
    ah.fingerprint = static_cast<uint32_t>(m.rank);
    ah.step = static_cast<uint32_t>(ErrorKind::Aborted);
    m.transport->abortAll(ah);
  }
}

std::optional<ErrorInfo> Communicator::abortCause() const { return impl_->currentAbortCause(); }

const std::vector<int>& Communicator::originalRanks() const { return impl_->originalRanks; }

Communicator Communicator::shrink(std::optional<std::chrono::milliseconds> timeout) {
  Impl& m = *impl_;
  const auto wait = timeout.value_or(m.timeout.count() > 0 ? m.timeout : std::chrono::seconds(60));
  const std::string prefix = "shrink/" + std::to_string(m.shrinks++) + "/";
  std::optional<ErrorInfo> cause = m.currentAbortCause();
  const int dead = cause && cause->culprit >= 0 && cause->culprit != m.rank ? cause->culprit : -1;
  const int expected = m.size - (dead >= 0 ? 1 : 0);
  m.store->setString(prefix + "alive/" + std::to_string(m.rank), "1");
  const int64_t arrival = m.store->add(prefix + "count", 1);
  if (arrival == 1) {
    // The first to arrive closes the membership: everyone expected, or whoever came
    // before the deadline.
    const auto until = Deadline::Clock::now() + wait;
    while (m.store->add(prefix + "count", 0) < expected && Deadline::Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string members;
    for (int r = 0; r < m.size; ++r) {
      if (m.store->check({prefix + "alive/" + std::to_string(r)}))
        members += (members.empty() ? "" : " ") + std::to_string(r);
    }
    m.store->setString(prefix + "members", members);
  }
  m.store->wait({prefix + "members"}, wait + std::chrono::seconds(5));
  std::vector<int> members;
  {
    std::istringstream is(m.store->getString(prefix + "members"));
    for (int r; is >> r;) members.push_back(r);
  }
  auto me = std::find(members.begin(), members.end(), m.rank);
  if (me == members.end()) {
    throwError(ErrorKind::Timeout,
               "shrink: this rank arrived after the survivors had agreed on the members", m.rank);
  }
  CommOptions o = m.options;
  o.name = m.options.name + ".shrink" + std::to_string(m.shrinks - 1);
  const int newRank = static_cast<int>(me - members.begin());
  TCCL_INFO("shrink: " << members.size() << " of " << m.size << " ranks remain; rank " << m.rank
                       << " becomes " << newRank);
  Communicator next(m.userStore, newRank, static_cast<int>(members.size()), o);
  for (size_t i = 0; i < members.size(); ++i)
    next.impl_->originalRanks[i] = m.originalRanks[static_cast<size_t>(members[i])];
  // A store server this rank hosts must outlive the new communicator too.
  next.impl_->ownedServer = std::move(m.ownedServer);
  return next;
}

// ---- execution -------------------------------------------------------------------------

void Communicator::Impl::progressLoop() {
  for (;;) {
    std::pair<PreparedCall, WorkPtr> task;
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

// Runs one call on the calling thread. execMu is held.
void Communicator::Impl::execute(PreparedCall& call, CallStats* stats) {
  checkUsable();  // an earlier queued call may have failed
  if (call.kind == Kind::AllReduce && call.algorithm == Algorithm::Auto) {
    const size_t bytes = call.count * dataTypeSize(call.dtype);
    const bool explain = log::enabled(log::Level::Info);
    if (!explain && bytes == autoMemoBytes) {
      call.algorithm = autoMemoAlgo;
    } else {
      call.algorithm = chooseAllreduce(bytes, explain ? &call.why : nullptr);
      autoMemoBytes = bytes;
      autoMemoAlgo = call.algorithm;
    }
  }
  const char* name = kindName(call.kind);
  const size_t elem = dataTypeSize(call.dtype);
  const size_t c = call.count;
  const size_t block = c * elem;
  const size_t r = static_cast<size_t>(rank);
  const bool isRoot = call.root == rank;
  int64_t timeoutMs = -1;
  const Deadline deadline = deadlineFor(call.timeout, &timeoutMs);
  const auto start = Deadline::Clock::now();
  stats->collective = name;
  stats->algorithm = call.algorithm == Algorithm::Auto ? "" : std::string(toString(call.algorithm));
  stats->seq = call.seq;
  stats->count = c;
  stats->bytes = block;
  TCCL_INFO(name << " #" << call.seq << " " << c << " x " << toString(call.dtype) << " "
                 << toString(call.op)
                 << (call.root >= 0 ? " root/peer " + std::to_string(call.root) : std::string())
                 << ": " << (stats->algorithm.empty() ? "-" : stats->algorithm) << " (" << call.why
                 << ")");

  const size_t segElems = std::max<size_t>(1, segmentBytes / elem);
  const uint8_t* in = call.in;
  uint8_t* out = call.out;
  ExecContext ctx;
  algo::Schedule schedule;
  std::vector<uint8_t> inputCopy;
  // Local parts of the result that never cross the wire: copy them (unless in place).
  auto localCopy = [&](uint8_t* dst, const uint8_t* src, size_t bytes) {
    if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
  };
  switch (call.kind) {
    case Kind::AllReduce:
      schedule = algo::allreduceSchedule(
          call.algorithm, rank, size, c, segElems,
          call.algorithm == Algorithm::Hierarchical ? &topology->layout() : nullptr);
      // Naive reads its input while it writes its output; in place, it works from a copy.
      if (algo::allreduceReadsInputLate(call.algorithm) && in == out && c > 0 && size > 1) {
        inputCopy.assign(in, in + block);
        in = inputCopy.data();
      }
      if (size == 1) localCopy(out, in, block);
      break;
    case Kind::ReduceScatter:
      schedule = algo::ringReduceScatter(rank, size, c, segElems);
      ctx.outputOrigin = r * c;
      if (size == 1) localCopy(out, in, block);
      break;
    case Kind::AllGather:
      schedule = algo::ringAllGather(rank, size, c, segElems);
      ctx.inputOrigin = r * c;
      localCopy(out + r * block, in, block);
      break;
    case Kind::Broadcast:
      schedule = call.algorithm == Algorithm::Tree
                     ? algo::binomialBroadcast(rank, size, call.root, c, segElems)
                     : algo::chainBroadcast(rank, size, call.root, c, segElems);
      if (isRoot) localCopy(out, in, block);
      break;
    case Kind::Reduce:
      schedule = algo::binomialReduce(rank, size, call.root, c, segElems);
      if (size == 1) localCopy(out, in, block);
      break;
    case Kind::Barrier:
      schedule = algo::disseminationBarrier(rank, size);
      break;
    case Kind::AllToAll:
      schedule = algo::pairwiseAllToAll(rank, size, c, segElems);
      localCopy(out + r * block, in + r * block, block);
      break;
    case Kind::Gather:
      schedule = algo::flatGather(rank, size, call.root, c, segElems);
      if (isRoot) localCopy(out + r * block, in, block);
      break;
    case Kind::Scatter:
      schedule = algo::flatScatter(rank, size, call.root, c, segElems);
      ctx.outputOrigin = r * c;
      if (isRoot) localCopy(out, in + r * block, block);
      break;
    case Kind::Send:
      schedule = algo::sendTo(call.root, c, segElems);
      break;
    case Kind::Recv:
      schedule = algo::recvFrom(call.root, c, segElems);
      break;
  }
  if (stats->algorithm.empty()) stats->algorithm = schedule.algorithm;
  // One rank holding the whole result applies avg itself.
  const bool reduces =
      call.kind == Kind::AllReduce || call.kind == Kind::ReduceScatter || call.kind == Kind::Reduce;
  if (reduces && size == 1 && call.op == ReduceOp::Avg && c > 0)
    reduce::divide(out, c, call.dtype, size);
  if (schedule.scratchElems * elem > scratch.size()) scratch.resize(schedule.scratchElems * elem);

  ctx.input = in;
  ctx.output = out;
  ctx.scratch = scratch.data();
  ctx.dtype = call.dtype;
  ctx.op = call.op;
  ctx.worldSize = size;
  ctx.rank = rank;
  ctx.seq = static_cast<uint32_t>(call.seq);
  // Point-to-point messages carry a signature both ends compute alike.
  ctx.fingerprint = isP2P(call.kind)
                        ? wire::fingerprint("p2p", 0, static_cast<uint8_t>(call.dtype), 0, c, -1)
                        : wire::fingerprint(name, static_cast<uint8_t>(call.algorithm),
                                            static_cast<uint8_t>(call.dtype),
                                            static_cast<uint8_t>(call.op), c, call.root);
  ctx.collective = name;
  ctx.seqFull = call.seq;
  ctx.deadline = deadline;
  ctx.timeoutMs = timeoutMs;
  ctx.spinMicros = spinMicros;
  ctx.p2p = isP2P(call.kind);
  ctx.wakeFd = wakeFd;
  ctx.abortFlag = &abortFlag;
  ctx.watchPeers = transport->connectedPeers();
  if (fault && !ctx.p2p && (fault->seq < 0 || fault->seq == call.seq)) ctx.fault = &*fault;

  Running what;
  what.kind = call.kind;
  what.count = c;
  what.dtype = call.dtype;
  what.op = call.op;
  what.root = call.root;
  what.algorithm = call.algorithm;
  what.fingerprint = ctx.fingerprint;
  if (timeoutMs > 0 && hbPeriod.count() > 0)
    what.period =
        std::chrono::milliseconds(std::clamp<int64_t>(timeoutMs / 10, 20, hbPeriod.count()));
  if (!ctx.p2p) {
    bool faster = false;
    {
      std::lock_guard<std::mutex> lk(hbMu);
      faster = what.period.count() > 0 && what.period < hbPeriod;
      running = what;
      enteredSeq = call.seq;
      recent[static_cast<size_t>(call.seq) % kRecent] = {call.seq, what};
    }
    if (faster) hbCv.notify_all();
  }

  const CommStats before = transport->stats();
  try {
    if (!schedule.ops.empty()) {
      try {
        transport->connect(schedule.peers, deadline);
      } catch (const Error& e) {
        ErrorInfo info = e.info();
        info.collective = name;
        info.seq = call.seq;
        info.algorithm = schedule.algorithm;
        info.phase = "connect";
        info.timeoutMs = timeoutMs;
        throwError(std::move(info));
      }
      executor.run(schedule, ctx, *transport);
    }
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::InvalidArgument) throw;
    failCall(e, call, what);
  }
  if (!ctx.p2p) {
    std::lock_guard<std::mutex> lk(hbMu);
    completedSeq = call.seq;
  }
  const CommStats after = transport->stats();
  for (const auto& [peer, cnt] : after.perPeer) {
    auto it = before.perPeer.find(peer);
    stats->traffic.perPeer[peer] = it == before.perPeer.end() ? cnt : cnt - it->second;
  }
  stats->seconds = std::chrono::duration<double>(Deadline::Clock::now() - start).count();
}

}  // namespace tccl
