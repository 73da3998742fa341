#include "transport/tcp_link.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <utility>

namespace tccl {

TcpLink::TcpLink(int peer, Lane lane, std::string address, net::Fd fd)
    : Link(peer, lane, std::move(address)), fd_(std::move(fd)) {}

LinkIo TcpLink::failed(int err) {
  lastErrno_ = err;
  if (err == EAGAIN || err == EWOULDBLOCK) return {LinkStatus::Blocked, 0};
  if (err == EPIPE || err == ECONNRESET) return {LinkStatus::Closed, 0};
  return {LinkStatus::Error, 0};
}

LinkIo TcpLink::writev(const iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return {LinkStatus::Progress, static_cast<size_t>(n)};
    if (errno == EINTR) continue;
    return failed(errno);
  }
}

LinkIo TcpLink::readv(const iovec* iov, int iovcnt) {
  for (;;) {
    const ssize_t n = ::readv(fd_.get(), iov, iovcnt);
    if (n > 0) return {LinkStatus::Progress, static_cast<size_t>(n)};
    if (n == 0) {
      lastErrno_ = 0;
      return {LinkStatus::Closed, 0};
    }
    if (errno == EINTR) continue;
    return failed(errno);
  }
}

LinkIo TcpLink::peek(uint8_t* buf, size_t n) {
  for (;;) {
    const ssize_t got = ::recv(fd_.get(), buf, n, MSG_PEEK | MSG_DONTWAIT);
    if (got > 0) return {LinkStatus::Progress, static_cast<size_t>(got)};
    if (got == 0) {
      lastErrno_ = 0;
      return {LinkStatus::Closed, 0};
    }
    if (errno == EINTR) continue;
    return failed(errno);
  }
}

std::string TcpLink::errorText() const {
  if (lastErrno_ == 0) return "connection closed by the peer";
  if (lastErrno_ == ECONNRESET) return "connection reset by the peer";
  if (lastErrno_ == EPIPE) return "connection closed by the peer";
  return net::errnoString(lastErrno_);
}

short TcpLink::pollEvents(bool wantRead, bool wantWrite) const {
  return static_cast<short>((wantRead ? POLLIN : 0) | (wantWrite ? POLLOUT : 0));
}

void TcpLink::shutdownWrite() {
  if (!fd_.valid() || shut_) return;
  ::shutdown(fd_.get(), SHUT_WR);
  shut_ = true;
}

}  // namespace tccl
