#include "net/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include "tccl/error.hpp"

namespace tccl::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* s = strerror_r(err, buf, sizeof buf);
  return std::string(s);
}

std::string SockAddr::ip() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
  } else if (storage.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      // A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d; show them as IPv4.
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof buf);
      return buf;
    }
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    char name[IF_NAMESIZE] = {0};
    if (a->sin6_scope_id != 0 && if_indextoname(a->sin6_scope_id, name) != nullptr) {
      return std::string(buf) + "%" + name;  // link-local: getaddrinfo reads the scope back
    }
  } else {
    return "?";
  }
  return buf;
}

uint16_t SockAddr::port() const {
  if (storage.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  if (storage.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

std::string SockAddr::toString() const { return joinHostPort(ip(), port()); }

std::string joinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos && host.front() != '[')
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::pair<std::string, uint16_t> splitHostPort(const std::string& s) {
  std::string host;
  std::string port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      throwError(ErrorKind::InvalidArgument, "bad address '" + s + "': expected [v6]:port");
    }
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
    if (host.empty()) throwError(ErrorKind::InvalidArgument, "bad address '" + s + "': empty host");
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string::npos) {
      throwError(ErrorKind::InvalidArgument, "bad address '" + s + "': expected host:port");
    }
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      // "fd00::2:5000" could be an address with no port: IPv6 needs brackets.
      throwError(ErrorKind::InvalidArgument, "bad address '" + s +
                                                 "': write an IPv6 address in brackets, "
                                                 "[v6]:port (e.g. [::1]:29500)");
    }
  }
  char* end = nullptr;
  errno = 0;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || errno != 0 || p < 0 || p > 65535) {
    throwError(ErrorKind::InvalidArgument, "bad port in address '" + s + "'");
  }
  return {host, static_cast<uint16_t>(p)};
}

std::vector<SockAddr> resolve(const std::string& hostIn, uint16_t port, bool passive) {
  // "[::1]" (as users write it next to a port) means "::1".
  const std::string host = hostIn.size() >= 2 && hostIn.front() == '[' && hostIn.back() == ']'
                               ? hostIn.substr(1, hostIn.size() - 2)
                               : hostIn;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    throwError(ErrorKind::System, "cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::vector<SockAddr> out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    SockAddr a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    out.push_back(a);
  }
  freeaddrinfo(res);
  if (host.empty() && passive) {
    // Any address: the IPv6 wildcard first, which (IPV6_V6ONLY off) also takes IPv4.
    std::stable_partition(out.begin(), out.end(),
                          [](const SockAddr& a) { return a.storage.ss_family == AF_INET6; });
  }
  return out;
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) throwError(ErrorKind::System, "fcntl(F_GETFL): " + errnoString(errno));
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) {
    throwError(ErrorKind::System, "fcntl(F_SETFL): " + errnoString(errno));
  }
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void setDeadPeerTimeout(int fd, std::chrono::milliseconds userTimeout) {
  if (userTimeout.count() <= 0) return;
  // Probes start after a quarter of the timeout idle (1 s to 60 s), then every tenth
  // (1 s to 30 s); with TCP_USER_TIMEOUT set, Linux gives up on an unanswered probe once
  // the timeout has passed since the peer last answered, so the count is only a backstop.
  const auto ms = userTimeout.count();
  int on = 1;
  int idle = static_cast<int>(std::clamp<int64_t>(ms / 4000, 1, 60));
  int intvl = static_cast<int>(std::clamp<int64_t>(ms / 10000, 1, 30));
  int cnt = 10;
  auto user = static_cast<unsigned>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
}

namespace {
int64_t readSysctl(const char* path) {
  std::ifstream f(path);
  int64_t v = -1;
  if (!(f >> v)) return -1;
  return v;
}
}  // namespace

bool bufferCapsAllow(int bytes) {
  static const int64_t cap = std::min(readSysctl("/proc/sys/net/core/wmem_max"),
                                      readSysctl("/proc/sys/net/core/rmem_max"));
  return cap >= bytes;
}

void setBufferSizes(int fd, int sndbuf, int rcvbuf) {
  if (sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
}

Fd listenOn(const std::string& host, uint16_t port, int backlog) {
  std::string lastErr = "no address";
  for (const SockAddr& a : resolve(host, port, /*passive=*/true)) {
    Fd fd(::socket(a.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      lastErr = errnoString(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a.storage.ss_family == AF_INET6 &&
        IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr)) {
      // "::" serves both families whatever net.ipv6.bindv6only says.
      int zero = 0;
      setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a.storage), a.len) != 0 ||
        ::listen(fd.get(), backlog) != 0) {
      lastErr = a.toString() + ": " + errnoString(errno);
      continue;
    }
    setNonBlocking(fd.get());
    return fd;
  }
  throwError(ErrorKind::System, "cannot listen on " + joinHostPort(host, port) + ": " + lastErr);
}

Fd acceptNonBlocking(int listenFd, SockAddr* from, int* err) {
  SockAddr a;
  a.len = sizeof a.storage;
  for (;;) {
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&a.storage), &a.len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      setNoDelay(fd);
      if (from != nullptr) *from = a;
      return Fd(fd);
    }
    if (errno == EINTR) continue;
    // EAGAIN: nothing pending. ECONNABORTED and friends: that client is gone; the
    // caller simply polls again. EMFILE / ENFILE: the caller must not poll again at once
    // (the connection is still queued, so the listener stays readable).
    if (err != nullptr) *err = errno;
    return Fd();
  }
}

namespace {

// One nonblocking connect attempt bounded by the deadline. Returns 0 or an errno.
int connectOnce(const SockAddr& a, Deadline deadline, Fd* out) {
  Fd fd(::socket(a.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return errno;
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.storage), a.len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{fd.get(), POLLOUT, 0};
    for (;;) {
      int n = ::poll(&p, 1, deadline.pollTimeoutMs());
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) return ETIMEDOUT;
      break;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) return soerr;
  }
  setNoDelay(fd.get());
  *out = std::move(fd);
  return 0;
}

}  // namespace

Fd connectWithRetry(const std::string& host, uint16_t port, Deadline deadline, bool retryRefused) {
  auto start = Deadline::Clock::now();
  std::chrono::milliseconds backoff(2);
  std::string lastErr;
  int attempts = 0;
  for (;;) {
    ++attempts;
    std::vector<SockAddr> addrs;
    try {
      addrs = resolve(host, port);
    } catch (const Error& e) {
      lastErr = e.cause();
    }
    for (const SockAddr& a : addrs) {
      Fd fd;
      int err = connectOnce(a, deadline, &fd);
      if (err == 0) return fd;
      lastErr = a.toString() + ": " + errnoString(err);
      if (err == ECONNREFUSED && !retryRefused) {
        ErrorInfo info;
        info.kind = ErrorKind::PeerClosed;
        info.message = "connection refused: nothing listens at " + a.toString() +
                       " any more (the process exited?)";
        info.peerAddress = a.toString();
        throwError(std::move(info));
      }
    }
    if (deadline.expired()) break;
    // Full jitter over the upper half: clients that failed together spread out.
    thread_local std::minstd_rand jitter(std::random_device{}());
    auto sleepFor = std::chrono::milliseconds(
        backoff.count() / 2 +
        static_cast<int64_t>(jitter() % static_cast<uint64_t>(backoff.count() / 2 + 1)));
    if (!deadline.isNever()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at() -
                                                                        Deadline::Clock::now());
      sleepFor = std::max(std::chrono::milliseconds(0), std::min(sleepFor, left));
    }
    std::this_thread::sleep_for(sleepFor);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    if (deadline.expired()) break;
  }
  ErrorInfo info;
  info.kind = ErrorKind::Timeout;
  info.message = "could not connect to " + joinHostPort(host, port) + " after " +
                 std::to_string(attempts) + " attempts; last error: " + lastErr;
  info.peerAddress = joinHostPort(host, port);
  info.elapsedMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start).count();
  throwError(std::move(info));
}

SockAddr localAddress(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len);
  return a;
}

SockAddr peerAddress(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len);
  return a;
}

namespace {

IoStatus waitFor(int fd, short events, Deadline deadline, int* err) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, deadline.pollTimeoutMs());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (err) *err = errno;
      return IoStatus::Error;
    }
    if (n == 0) return IoStatus::Timeout;
    return IoStatus::Ok;
  }
}

}  // namespace

IoStatus sendAll(int fd, const void* buf, size_t len, Deadline deadline, size_t* done, int* err) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t sent = 0;
  IoStatus st = IoStatus::Ok;
  while (sent < len) {
    ssize_t n = ::send(fd, p + sent, len - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      st = waitFor(fd, POLLOUT, deadline, err);
      if (st != IoStatus::Ok) break;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      st = IoStatus::Closed;
    } else {
      if (err) *err = errno;
      st = IoStatus::Error;
    }
    break;
  }
  if (done) *done = sent;
  return st;
}

IoStatus recvAll(int fd, void* buf, size_t len, Deadline deadline, size_t* done, int* err) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  IoStatus st = IoStatus::Ok;
  while (got < len) {
    ssize_t n = ::recv(fd, p + got, len - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      st = IoStatus::Closed;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      st = waitFor(fd, POLLIN, deadline, err);
      if (st != IoStatus::Ok) break;
      continue;
    }
    if (errno == ECONNRESET) {
      st = IoStatus::Closed;
    } else {
      if (err) *err = errno;
      st = IoStatus::Error;
    }
    break;
  }
  if (done) *done = got;
  return st;
}

}  // namespace tccl::net
