#include "core/bootstrap.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <random>

#include "base/config.hpp"
#include "base/log.hpp"
#include "core/comm_impl.hpp"
#include "exec/spin.hpp"
#include "net/iface.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"
#include "transport/striped_link.hpp"
#include "transport/wire.hpp"

namespace tccl::bootstrap {

using namespace tccl::net;

std::string decideListenAddress(const std::string& explicitAddress, const std::string& routeAddress,
                                Store& store, int rank, int worldSize,
                                std::chrono::milliseconds timeout) {
  ListenRequest req;
  req.routeAddress = routeAddress;
  const auto ifname = config::getEnv("TCCL_SOCKET_IFNAME");
  if (ifname) req.ifname = *ifname;
  ListenChoice choice;
  try {
    if (auto fam = config::getEnv("TCCL_SOCKET_FAMILY")) req.family = parseFamily(*fam);
    if (!explicitAddress.empty()) {
      choice.address = explicitAddress;
      choice.why = "CommOptions::listenAddress";
      if (ifname || req.family != AF_UNSPEC) {
        choice.why += " (TCCL_SOCKET_IFNAME and TCCL_SOCKET_FAMILY do not apply)";
      }
    } else {
      choice = chooseListenAddress(listInterfaces(), req);
    }
  } catch (const Error& e) {
    throwError(e.info().kind, e.info().message, rank);
  }

  // The loopback rule looks at a numeric address; a name given in CommOptions counts as
  // loopback when every address it resolves to is.
  std::string numeric = choice.address;
  if (addressFamily(numeric) == AF_UNSPEC && !numeric.empty()) {
    try {
      auto addrs = resolve(numeric, 0);
      if (!addrs.empty() && std::all_of(addrs.begin(), addrs.end(), [](const SockAddr& a) {
            return isLoopbackAddress(a.ip());
          })) {
        numeric = addrs.front().ip();
      }
    } catch (const Error&) {
      // listenOn reports an unresolvable name.
    }
  }
  const HostIdentity self = thisHost();
  std::optional<HostIdentity> rank0;
  if (worldSize > 1) {
    if (rank == 0) {
      store.setString(kHostIdKey, self.toString());
    } else if (isLoopbackAddress(numeric) &&
               (routeAddress.empty() || isLoopbackAddress(routeAddress))) {
      store.wait({kHostIdKey}, timeout);
      rank0 = HostIdentity::parse(store.getString(kHostIdKey));
    }
  }
  if (auto problem = loopbackProblem(numeric, routeAddress, worldSize, self, rank0)) {
    throwError(ErrorKind::InvalidArgument, *problem, rank);
  }
  TCCL_INFO("listen address " << choice.address
                              << (choice.interface.empty() ? "" : " (" + choice.interface + ")")
                              << ": " << choice.why);
  return choice.address;
}

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

}  // namespace

int onlineCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string encodeJobRecord(const JobRecord& r) {
  return std::to_string(r.jobId) + " " + algo::encodeLinkModel(r.model);
}

std::optional<JobRecord> decodeJobRecord(const std::string& s) {
  const size_t sp = s.find(' ');
  if (sp == std::string::npos || sp == 0) return std::nullopt;
  JobRecord r;
  char* end = nullptr;
  errno = 0;
  const unsigned long long id = std::strtoull(s.c_str(), &end, 10);
  if (end != s.c_str() + sp || errno == ERANGE || s[0] == '-') return std::nullopt;
  r.jobId = id;
  auto model = algo::decodeLinkModel(s.substr(sp + 1));
  if (!model) return std::nullopt;
  r.model = *model;
  return r;
}

JobRecord joinJob(Store& store, int rank, const algo::LinkModel& model,
                  std::chrono::milliseconds timeout) {
  if (rank == 0) {
    JobRecord r;
    r.jobId = randomJobId();
    if (auto env = config::getEnv("TCCL_JOB_ID")) r.jobId = wire::hash64(*env);
    r.model = model;
    // Rank 0's cores: the cost model's oversubscription term uses the same figure on
    // every rank (TCCL_CORES overrides, for tests and for cgroup-limited containers).
    r.model.cores =
        static_cast<int>(config::getEnvInt("TCCL_CORES", 1, 1 << 20).value_or(onlineCores()));
    store.setString(kJobRecordKey, encodeJobRecord(r));
    return r;
  }
  try {
    store.wait({kJobRecordKey}, timeout);
  } catch (const Error& e) {
    // Only rank 0 writes the job record: when it never comes, rank 0 is the one to
    // name (it never started, or died first), as a missing rank is named later on.
    if (e.kind() != ErrorKind::Timeout) throw;
    ErrorInfo info = e.info();
    info.rank = rank;
    info.culprit = 0;
    info.detectedBy = rank;
    info.phase = "bootstrap";
    info.message = "rank 0 never published the job record (it did not start, or exited first): " +
                   e.info().message;
    throwError(std::move(info));
  }
  // Every field of the model is rank 0's: ranks whose tune files differ still choose alike.
  auto r = decodeJobRecord(store.getString(kJobRecordKey));
  if (!r) throwError(ErrorKind::Store, "malformed job record in the store", rank);
  return *r;
}

}  // namespace tccl::bootstrap

// ---- the Communicator's construction steps ------------------------------------------------

namespace tccl {

namespace {

// Busy-poll (yielding the core each round) this long before sleeping in poll(2):
// a wake-up from poll costs tens of microseconds, more than a small message's hop.
// Measured in docs/PERFORMANCE.md.
constexpr int64_t kDefaultSpinMicros = 50;

}  // namespace

namespace bootstrap {

void configureBuffers(TransportConfig& tc) {
  const std::optional<int> fixed = config::socketBufferBytes();
  tc.socketBufferBytes = fixed.value_or(0);
  tc.sameHostSendBuffer = fixed ? 0 : config::kSameHostSendBuffer;
  // Below the kernel's caps a fixed buffer would be smaller than asked (and unmeasured):
  // those links keep autotuning.
  tc.sameHostP2PBuffer =
      !fixed && net::bufferCapsAllow(config::kSameHostP2PBuffer) ? config::kSameHostP2PBuffer : 0;
}

void configureStriping(TransportConfig& tc, const algo::LinkModel& model, size_t segmentBytes,
                       std::string* why) {
  tc.nsocks = config::nsocks();
  const algo::StripeChoice c =
      algo::chooseStriping(tc.nsocks, segmentBytes, model, why, kStripeFloorBytes);
  tc.stripeMinBytes = c.stripe ? c.minBytes : UINT64_MAX;
  if (auto forced = config::stripeBytes(); forced && tc.nsocks > 1) {
    tc.stripeMinBytes = *forced;
    if (why != nullptr) {
      *why = "striping messages of " + std::to_string(*forced) +
             " bytes and more (TCCL_STRIPE_BYTES; the cost model said: " + *why + ")";
    }
  }
}

}  // namespace bootstrap

void Communicator::Impl::readSettings(std::shared_ptr<Store> userStore, int rank, int size,
                                      CommOptions options) {
  Boot& b = boot;
  b.userStore = userStore;
  b.rank = rank;
  b.size = size;
  b.options = options;
  b.timeout = options.timeout;
  if (auto t = config::timeoutMs()) b.timeout = std::chrono::milliseconds(*t);
  b.segmentBytes = options.segmentBytes ? options.segmentBytes : config::segmentBytes();
  b.segmentFixed = options.segmentBytes != 0 || config::getEnv("TCCL_SEGMENT_BYTES").has_value();
  b.spinMicros = static_cast<int>(config::spinMicros().value_or(kDefaultSpinMicros));
  b.envAlgorithm = config::allreduceAlgorithm();
  b.model = algo::LinkModel::fromEnv();
  b.store = std::make_shared<PrefixStore>("tccl/" + options.name, userStore);
}

void Communicator::Impl::joinJob() {
  Boot& b = boot;
  const bootstrap::JobRecord job = bootstrap::joinJob(*b.store, b.rank, b.model, b.timeout);
  b.jobId = job.jobId;
  b.model = job.model;
  b.adaptiveYield = adaptiveYieldFor(b.size, b.model.cores);
}

void Communicator::Impl::openTransport() {
  Boot& b = boot;
  TransportConfig tc;
  tc.rank = b.rank;
  tc.worldSize = b.size;
  tc.jobId = b.jobId;
  tc.commId = wire::hash64(b.options.name);
  bootstrap::configureBuffers(tc);
  tc.maxPending = config::listenMaxPending();
  tc.handshakeTimeout = config::handshakeTimeout();
  // A vanished peer host is detected within the communicator's timeout by default: a
  // shorter one could end a link whose peer merely does not read for a while (the Linux
  // TCP_USER_TIMEOUT caveat in net/socket.hpp), and that peer fails the timeout anyway.
  tc.deadPeerTimeout = config::tcpUserTimeout().value_or(b.timeout);
  // Where to listen and publish: CommOptions::listenAddress, else TCCL_SOCKET_IFNAME /
  // TCCL_SOCKET_FAMILY, else this host's end of the route to the store; loopback is
  // refused when the job may span hosts (src/net/iface.hpp, docs/network.md).
  std::string route;
  if (auto* tcp = dynamic_cast<TcpStore*>(b.userStore.get())) route = tcp->localAddress();
  if (route.empty()) route = b.options.routeAddress;
  tc.listenAddress = bootstrap::decideListenAddress(b.options.listenAddress, route, *b.store,
                                                    b.rank, b.size, b.timeout);
  std::string striping;
  bootstrap::configureStriping(tc, b.model, b.segmentBytes, &striping);
  if (tc.nsocks > 1) TCCL_INFO("TCCL_NSOCKS=" << tc.nsocks << ": " << striping);
  b.transport = std::make_shared<Transport>(tc, b.store);
  b.hub = b.transport;  // this communicator is its family's root
  b.topology =
      std::make_unique<Topology>(b.store, b.rank, b.size, b.transport->listenAddress(), b.timeout);
  b.joined = true;
  b.originalRanks.resize(static_cast<size_t>(b.size));
  for (int r = 0; r < b.size; ++r) b.originalRanks[static_cast<size_t>(r)] = r;
  b.parentRanks = b.originalRanks;
  b.worldRanks = b.originalRanks;
}

void Communicator::Impl::leaveStore() noexcept {
  if (!boot.joined) return;  // the constructor failed: this rank never joined
  try {
    int64_t left = boot.store->add(bootstrap::kExitedKey, 1);
    if (!boot.ownedServer || !boot.waitForExits) return;
    // After a failure the culprit may never count itself out: wait less, and for
    // one rank fewer.
    const bool failed = currentAbortCause().has_value();
    const auto until =
        Deadline::Clock::now() + (failed ? std::chrono::seconds(5) : std::chrono::seconds(30));
    while (left < boot.size - (failed ? 1 : 0) && Deadline::Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      left = boot.store->add(bootstrap::kExitedKey, 0);
    }
  } catch (...) {
    // The store is gone or broken: nothing left to wait for.
  }
}

}  // namespace tccl
