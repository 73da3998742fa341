// The in-memory link pair of link.hpp (unit tests): two bounded byte queues under one
// mutex, and an eventfd per end that the other end writes when it changes this end's
// readiness.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>

#include "net/socket.hpp"
#include "tccl/error.hpp"
#include "transport/link.hpp"

namespace tccl {
namespace {

// One direction: a ring buffer written by one end and read by the other.
struct Queue {
  std::unique_ptr<uint8_t[]> buf;  // uninitialised: a large capacity costs only what is used
  size_t cap = 0;
  size_t head = 0;  // the oldest byte
  size_t size = 0;
  bool writerDone = false;  // the writer shut down or is gone: end of file after the data
  bool readerGone = false;  // the reader is gone: writes fail

  size_t capacity() const { return cap; }
  // Copies the first n queued bytes into the iovecs (without consuming them).
  size_t copyOut(const iovec* iov, int iovcnt, size_t n) const {
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < n; ++i) {
      auto* dst = static_cast<uint8_t*>(iov[i].iov_base);
      size_t want = std::min(iov[i].iov_len, n - done);
      for (size_t k = 0; k < want;) {
        const size_t pos = (head + done) % capacity();
        const size_t run = std::min(want - k, capacity() - pos);
        std::memcpy(dst + k, buf.get() + pos, run);
        k += run;
        done += run;
      }
    }
    return done;
  }
  void pop(size_t n) {
    head = (head + n) % capacity();
    size -= n;
  }
  size_t push(const iovec* iov, int iovcnt, size_t n) {
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < n; ++i) {
      const auto* src = static_cast<const uint8_t*>(iov[i].iov_base);
      size_t want = std::min(iov[i].iov_len, n - done);
      for (size_t k = 0; k < want;) {
        const size_t pos = (head + size) % capacity();
        const size_t run = std::min(want - k, capacity() - pos);
        std::memcpy(buf.get() + pos, src + k, run);
        k += run;
        size += run;
        done += run;
      }
    }
    return done;
  }
};

struct Shared {
  std::mutex mu;
  Queue queue[2];   // queue[i]: written by end i, read by end 1 - i
  net::Fd wake[2];  // wake[i]: end i's eventfd
};

size_t totalLength(const iovec* iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

class MemLink final : public Link {
 public:
  MemLink(int peer, Lane lane, std::shared_ptr<Shared> shared, int side, uint64_t seed)
      : Link(peer, lane, "mem"),
        s_(std::move(shared)),
        side_(side),
        random_(seed != 0),
        rng_(seed) {}

  ~MemLink() override {
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      out().writerDone = true;
      in().readerGone = true;
    }
    signalPeer();
  }

  LinkIo writev(const iovec* iov, int iovcnt) override {
    bool wasEmpty = false;
    size_t n = 0;
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      Queue& q = out();
      if (shut_ || q.readerGone) return {LinkStatus::Closed, 0};
      const size_t room = q.capacity() - q.size;
      if (room == 0) return {LinkStatus::Blocked, 0};
      n = pick(std::min(room, totalLength(iov, iovcnt)));
      if (n == 0) return {LinkStatus::Progress, 0};
      wasEmpty = q.size == 0;
      q.push(iov, iovcnt, n);
    }
    if (wasEmpty) signalPeer();
    return {LinkStatus::Progress, n};
  }

  LinkIo readv(const iovec* iov, int iovcnt) override {
    bool wasFull = false;
    size_t n = 0;
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      Queue& q = in();
      if (q.size == 0) {
        return {q.writerDone ? LinkStatus::Closed : LinkStatus::Blocked, 0};
      }
      n = pick(std::min(q.size, totalLength(iov, iovcnt)));
      if (n == 0) return {LinkStatus::Progress, 0};
      wasFull = q.size == q.capacity();
      q.copyOut(iov, iovcnt, n);
      q.pop(n);
    }
    if (wasFull) signalPeer();
    return {LinkStatus::Progress, n};
  }

  LinkIo peek(uint8_t* buf, size_t len) override {
    std::lock_guard<std::mutex> lk(s_->mu);
    Queue& q = in();
    if (q.size == 0) {
      return {q.writerDone ? LinkStatus::Closed : LinkStatus::Blocked, 0};
    }
    const size_t n = pick(std::min(q.size, len));
    iovec iov = {buf, n};
    q.copyOut(&iov, 1, n);
    return {LinkStatus::Progress, n};
  }

  // Transfers fail only by Closed: the peer shut down or is gone (or this end shut down).
  std::string errorText() const override { return "connection closed by the peer"; }

  int pollFd() const override { return s_->wake[side_].get(); }
  short pollEvents(bool wantRead, bool wantWrite) const override {
    return static_cast<short>(wantRead || wantWrite ? POLLIN : 0);
  }
  void afterWake() override {
    uint64_t v = 0;
    const ssize_t r = ::read(s_->wake[side_].get(), &v, sizeof v);
    (void)r;
  }

  void shutdownWrite() override {
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      if (shut_) return;
      shut_ = true;
      out().writerDone = true;
    }
    signalPeer();
  }
  bool open() const override { return !shut_; }

 private:
  Queue& out() { return s_->queue[side_]; }
  Queue& in() { return s_->queue[1 - side_]; }

  // How many of n available bytes to move: all, or with a seed a random 1..n.
  size_t pick(size_t n) {
    if (!random_ || n <= 1) return n;
    return std::uniform_int_distribution<size_t>(1, n)(rng_);
  }

  void signalPeer() {
    const uint64_t one = 1;
    const ssize_t r = ::write(s_->wake[1 - side_].get(), &one, sizeof one);
    (void)r;
  }

  std::shared_ptr<Shared> s_;
  int side_;
  bool shut_ = false;
  bool random_;
  std::mt19937_64 rng_;
};

}  // namespace

MemLinkPair makeMemLinkPair(int rankA, int rankB, Lane lane, size_t capacity, uint64_t seed) {
  auto shared = std::make_shared<Shared>();
  for (int i = 0; i < 2; ++i) {
    shared->queue[i].cap = std::max<size_t>(capacity, 1);
    shared->queue[i].buf.reset(new uint8_t[shared->queue[i].cap]);
    net::Fd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!fd.valid()) throwError(ErrorKind::System, "eventfd: " + net::errnoString(errno));
    shared->wake[i] = std::move(fd);
  }
  MemLinkPair p;
  // Distinct streams for the two ends (a seed of 0 stays 0: whole transfers).
  const uint64_t seedB = seed == 0 ? 0 : seed * 0x9E3779B97F4A7C15ull + 1;
  p.a = std::make_unique<MemLink>(rankB, lane, shared, 0, seed);
  p.b = std::make_unique<MemLink>(rankA, lane, shared, 1, seedB);
  return p;
}

}  // namespace tccl
