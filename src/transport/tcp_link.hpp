// A Link over a connected, nonblocking TCP socket, which it owns.
#pragma once

#include <string>

#include "net/socket.hpp"
#include "transport/link.hpp"

namespace tccl {

class TcpLink final : public Link {
 public:
  TcpLink(int peer, Lane lane, std::string address, net::Fd fd);

  // sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT), readv, recv(MSG_PEEK | MSG_DONTWAIT). EINTR is
  // retried; EAGAIN is Blocked; end of file, EPIPE and ECONNRESET are Closed.
  LinkIo writev(const iovec* iov, int iovcnt) override;
  LinkIo readv(const iovec* iov, int iovcnt) override;
  LinkIo peek(uint8_t* buf, size_t n) override;
  // A nonblocking readv copies all the socket has queued, up to the ask.
  bool shortReadDrains() const override { return true; }
  std::string errorText() const override;

  int pollFd() const override { return fd_.get(); }
  short pollEvents(bool wantRead, bool wantWrite) const override;

  void shutdownWrite() override;
  bool open() const override { return fd_.valid() && !shut_; }

 private:
  // A failed transfer: Closed (ECONNRESET, EPIPE) or Error (anything else).
  LinkIo failed(int err);

  net::Fd fd_;
  bool shut_ = false;
  int lastErrno_ = 0;  // 0: the last Closed was an end of file
};

}  // namespace tccl
