// Thin, honest wrappers over BSD sockets: RAII descriptors, address resolution,
// listen/accept/connect-with-retry, and blocking-with-deadline send/recv helpers for
// the few places that want them (handshake, store protocol). EINTR, short reads and
// writes, and SIGPIPE (MSG_NOSIGNAL) are handled here and nowhere else.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tccl/types.hpp"

namespace tccl::net {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  std::string toString() const;  // "1.2.3.4:5" or "[::1]:5"
  // Numeric address: "1.2.3.4", "::1", "fe80::1%eth0" (link-local keeps its scope);
  // an IPv4-mapped IPv6 address (a dual-stack listener's IPv4 peer) as plain IPv4.
  std::string ip() const;
  uint16_t port() const;
};

// Resolves host (name or literal, IPv4 or IPv6, "[v6]" accepted; "" means any
// address, the IPv6 wildcard first) to candidate addresses of both families.
// Throws SystemError naming the host on failure.
std::vector<SockAddr> resolve(const std::string& host, uint16_t port, bool passive = false);

// Splits "host:port" or "[v6]:port" (the host comes back without brackets). Throws
// InvalidArgumentError, also for an unbracketed IPv6 address ("::1:80" is ambiguous).
std::pair<std::string, uint16_t> splitHostPort(const std::string& s);
// Joins host and port, bracketing IPv6 literals: "[::1]:5".
std::string joinHostPort(const std::string& host, uint16_t port);

// A listening socket on host:port (port 0: ephemeral), nonblocking, SO_REUSEADDR.
// "::" listens on both families (IPV6_V6ONLY off). The backlog is SOMAXCONN (the kernel
// caps it at net.core.somaxconn): a thousand ranks connecting at once to the store or to
// one rank must wait in it, not be refused.
inline constexpr int kListenBacklog = SOMAXCONN;
Fd listenOn(const std::string& host, uint16_t port, int backlog = kListenBacklog);

// Accepts one pending connection from a nonblocking listener; invalid Fd if none, with
// *err (when given) the errno of the failed accept (EAGAIN: nothing pending; EMFILE /
// ENFILE: out of descriptors, the connection stays queued and the caller must back off).
Fd acceptNonBlocking(int listenFd, SockAddr* from = nullptr, int* err = nullptr);

// Connects, retrying failed attempts with jittered exponential backoff (2 ms doubling to
// 200 ms, each sleep drawn from [half, all] of it, so a thousand clients refused at once
// do not come back in lockstep) until the deadline. Returns a
// connected socket in nonblocking mode with TCP_NODELAY set. Throws TimeoutError
// naming the address and the last OS error. With retryRefused = false, a refused
// connection (nothing listens there: the process that published the address is
// gone) throws PeerClosedError at once instead of being retried.
Fd connectWithRetry(const std::string& host, uint16_t port, Deadline deadline,
                    bool retryRefused = true);

void setNonBlocking(int fd, bool on = true);
void setNoDelay(int fd);
// TCP keepalive with probes while the connection is idle, and TCP_USER_TIMEOUT: a peer
// whose host vanished without a FIN (power loss, cable, a dropped link) is detected in
// about `userTimeout` (the socket then fails with ETIMEDOUT) whether or not data is in
// flight. Caveat (Linux): the same timeout also ends a connection whose peer keeps its
// receive window shut (does not read) for that long. 0 or less: leaves the socket alone.
void setDeadPeerTimeout(int fd, std::chrono::milliseconds userTimeout);
// Whether the kernel lets an unprivileged SO_SNDBUF and SO_RCVBUF reach `bytes`
// (net.core.wmem_max and rmem_max, read once; false if they cannot be read).
bool bufferCapsAllow(int bytes);
// Optional explicit socket buffer sizes (bytes; 0 keeps the kernel's autotuning).
void setBufferSizes(int fd, int sndbuf, int rcvbuf);

SockAddr localAddress(int fd);
SockAddr peerAddress(int fd);

enum class IoStatus { Ok, Timeout, Closed, Error };

// Send/receive exactly len bytes on a nonblocking socket, waiting with poll(2) until
// the deadline. *done is set to the bytes actually transferred; *err to errno on Error.
IoStatus sendAll(int fd, const void* buf, size_t len, Deadline deadline, size_t* done = nullptr,
                 int* err = nullptr);
IoStatus recvAll(int fd, void* buf, size_t len, Deadline deadline, size_t* done = nullptr,
                 int* err = nullptr);

// strerror(3) as a std::string.
std::string errnoString(int err);

}  // namespace tccl::net
